#include "launch/thread_budget.h"

#include <sched.h>

#include <algorithm>

#include "common/knobs.h"

namespace fsdp::launch {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

bool user_set_thread_count() { return knobs::kOpenblasNumThreads.is_set() || knobs::kOmpNumThreads.is_set(); }

ThreadBudget decide_thread_budget(int cores, int local_world_size, bool user_set) {
  ThreadBudget b;
  const int ranks = std::max(1, local_world_size);
  if (user_set) {
    b.from_user = true;
    b.describe = "BLAS/OpenMP threads per rank as set by the user (OPENBLAS_NUM_THREADS=" +
                 knobs::kOpenblasNumThreads.get() + " OMP_NUM_THREADS=" + knobs::kOmpNumThreads.get() + ")";
    return b;
  }
  b.threads = std::max(1, cores / ranks);
  b.describe = std::to_string(b.threads) + " BLAS/OpenMP thread(s) per rank: " + std::to_string(cores) +
               " core(s) for " + std::to_string(ranks) +
               " local rank(s) (set OPENBLAS_NUM_THREADS or OMP_NUM_THREADS to choose)";
  return b;
}

std::vector<std::string> thread_budget_env(const ThreadBudget& budget) {
  if (budget.from_user) return {};
  const std::string n = std::to_string(budget.threads);
  return {"OPENBLAS_NUM_THREADS=" + n, "OMP_NUM_THREADS=" + n};
}

}  // namespace fsdp::launch
