// How transports that connect by address blobs (UCX worker addresses) gather every rank's blob: an
// all-gather of one printable string per rank, supplied by whoever bootstraps the job. connect_world
// (launch/world.cc) runs it over the rendezvous store; forked ranks on one host without a store
// (tests, fsdp-demo) use a directory.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace fsdp {

// Called once per rank with this rank's blob; returns every rank's, indexed by rank (ours included).
// Blobs are printable ASCII (hex_encode binary ones). Throws (e.g. TimeoutError) when a rank never
// published; must not return a partial list.
using AddressExchange = std::function<std::vector<std::string>(const std::string& mine)>;

// Each rank writes its blob to `dir`/<rank> (written aside, then renamed: no reader sees half of
// it) and waits for all of them, polling every millisecond, for at most `timeout`; then throws
// TimeoutError naming the ranks missing. The directory must exist and be private to the job.
AddressExchange directory_exchange(std::string dir, int rank, int size, std::chrono::milliseconds timeout);

std::string hex_encode(const void* data, size_t bytes);
// Throws InvalidArgument on odd lengths or non-hex characters.
std::vector<std::byte> hex_decode(const std::string& text);

}  // namespace fsdp
