// Forks n processes on this host, one per rank, each running body(rank) and exiting with its return
// value: the benchmarks' and tests' way to run a real multi-process job without a launcher binary.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

namespace fsdp::launch {

// Returns every rank's exit code (128 + signal when killed). A rank still running at the deadline is
// killed (SIGKILL) and reported as -1; an exception escaping body is printed and exits with 99.
std::vector<int> fork_ranks(int n, std::chrono::milliseconds deadline, const std::function<int(int rank)>& body);

}  // namespace fsdp::launch
