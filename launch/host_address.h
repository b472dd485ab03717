// This host's network addresses, as a launcher needs them: is an address the loopback, which IPv4
// address an interface has, which address other hosts reach us at. fsdp-store, connect_world and
// the NCCL API's rendezvous listener all ask these questions; they are answered here once.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp::launch {

// "localhost", "::1" or any 127.x.y.z: an address nothing outside this host can reach.
bool is_loopback(const std::string& host);

// The first IPv4 address of the interface named `name` ("eth0"), or "" when there is no such
// interface or it has none.
std::string interface_address(const std::string& name);

// The first IPv4 address of an interface that is up and not the loopback: what other hosts can
// reach when nothing better is known. "" when there is none.
std::string first_external_address();

// The local address this host uses to reach host:port: a UDP socket "connected" there (no packet is
// sent) reports the source address routing picked. "" when host does not resolve or is unreachable.
std::string source_address_towards(const std::string& host, uint16_t port);

}  // namespace fsdp::launch
