// How many BLAS / OpenMP threads each rank runs: the cores this process may run on
// (sched_getaffinity) shared among the ranks of this host, unless the user chose through
// OPENBLAS_NUM_THREADS or OMP_NUM_THREADS. Without it N ranks each start one OpenBLAS thread per
// core, N x cores threads contend for the cores, and every GEMM waits on the slowest.
//
//   ThreadBudget b = decide_thread_budget(available_cores(), local_world_size, user_set_thread_count());
//   // fsdp-run: add thread_budget_env(b) to each child; fsdp-train: set the BLAS library's count.
#pragma once

#include <string>
#include <vector>

namespace fsdp::launch {

struct ThreadBudget {
  int threads = 1;        // per rank, at least 1
  bool from_user = false; // OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is set: leave them alone
  std::string describe;   // the start-up line: what was chosen and why
};

// Cores this process may run on (its affinity mask), at least 1.
int available_cores();
// OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is set (not empty) in this process.
bool user_set_thread_count();

// cores / local_world_size (at least 1), or from_user when the user chose.
ThreadBudget decide_thread_budget(int cores, int local_world_size, bool user_set);

// The variables a rank's environment gets ("OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1"); none when
// the user chose (the inherited ones pass through).
std::vector<std::string> thread_budget_env(const ThreadBudget& budget);

}  // namespace fsdp::launch
