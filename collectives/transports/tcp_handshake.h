// What a tcp connection carries before and between payloads, as checks of bytes with no socket: the
// TcpHello each connection opens with, and the frame header in front of every control message and
// data piece. tcp.cc runs these on what arrives and fuzz/tcp_handshake.cc on what a fuzzer makes, so
// the code under the fuzzer is the code under the job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "collectives/transports/message_header.h"
#include "collectives/transports/rank_handshake.h"

namespace fsdp {

// The handshake each connection opens with (rank_handshake.h has the protocol): connection i of a
// pair is dialed by the lower rank; its hello names the connection and the pair's connection count.
using TcpHello = RankHello;
inline constexpr uint64_t kTcpHelloMagic = 0x6673647074637031ull;  // "fsdptcp1"
// 3: the authenticated handshake; 2: the shared fabric protocol over the connections.
inline constexpr uint32_t kTcpVersion = 3;
inline constexpr std::string_view kTcpDialLabel = "fsdp-tcp dial";
inline constexpr std::string_view kTcpAcceptLabel = "fsdp-tcp accept";

// check_hello_wire for this transport's magic and version.
std::string check_tcp_wire(const TcpHello& h);

// Empty when the frame header `h`, read off connection `connection` of a pair, may be acted on before
// anything more is read for it; otherwise what is wrong. Beyond check_header: control frames travel
// on connection 0 only, and a data piece must lie inside the receive its id names, of
// `transfer_bytes` bytes (nullopt: no receive has that id).
std::string check_tcp_frame(const MessageHeader& h, size_t connection, std::optional<uint64_t> transfer_bytes);

}  // namespace fsdp
