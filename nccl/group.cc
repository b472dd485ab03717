#include "nccl/group.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "nccl/comm.h"

namespace fsdp::nccl {
namespace {

struct GroupState {
  int depth = 0;
  ncclResult_t error = ncclSuccess;  // the first call inside the group that failed
  std::vector<Pending> ops;          // each holds a reference on its communicator
  std::vector<std::function<ncclResult_t()>> actions;
};

thread_local GroupState t_group;

// Posts in order, stopping at the first that cannot be posted, then waits for everything posted.
// Only the first failure is recorded as the last error: the ones after it are usually its echoes
// (operations aborted because the communicator broke).
ncclResult_t run_ops(const std::vector<Pending>& ops) {
  std::vector<std::pair<const Pending*, Work>> posted;
  ncclResult_t first = ncclSuccess;
  for (const Pending& p : ops) {
    first = guarded(p.comm, p.fn, [&] {
      posted.emplace_back(&p, p.post(usable(p.comm)));
      return ncclSuccess;
    });
    if (first != ncclSuccess) break;
  }
  for (auto& [p, work] : posted) {
    try {
      work.wait();
    } catch (...) {
      const ncclResult_t r = fail(p->comm, p->fn, std::current_exception(), first == ncclSuccess);
      if (first == ncclSuccess) first = r;
    }
  }
  return first;
}

ncclResult_t run_actions(std::vector<std::function<ncclResult_t()>>& actions) {
  if (actions.empty()) return ncclSuccess;
  if (actions.size() == 1) return actions[0]();
  std::vector<ncclResult_t> results(actions.size(), ncclSuccess);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < actions.size(); ++i) {
    try {
      threads.emplace_back([&results, &actions, i] { results[i] = actions[i](); });
    } catch (...) {
      results[i] = fail(nullptr, "ncclGroupEnd", std::current_exception());
    }
  }
  for (std::thread& t : threads) t.join();
  for (ncclResult_t r : results) {
    if (r != ncclSuccess) return r;
  }
  return ncclSuccess;
}

void release(std::vector<Pending>& ops) {
  for (Pending& p : ops) unpin(p.comm);
  ops.clear();
}

}  // namespace

bool in_group() { return t_group.depth > 0; }

ncclResult_t submit(std::vector<Pending> ops) {
  if (!in_group()) return run_ops(ops);
  for (Pending& p : ops) {
    pin(p.comm);
    t_group.ops.push_back(std::move(p));
  }
  return ncclSuccess;
}

ncclResult_t run_or_defer(std::function<ncclResult_t()> action) {
  if (!in_group()) return action();
  t_group.actions.push_back(std::move(action));
  return ncclSuccess;
}

void group_failed(ncclResult_t code) {
  if (in_group() && t_group.error == ncclSuccess) t_group.error = code;
}

void forget(ncclComm* comm) {
  auto& ops = t_group.ops;
  auto keep = std::stable_partition(ops.begin(), ops.end(), [comm](const Pending& p) { return p.comm != comm; });
  for (auto it = keep; it != ops.end(); ++it) unpin(it->comm);
  ops.erase(keep, ops.end());
}

ncclResult_t group_start() {
  ++t_group.depth;
  return ncclSuccess;
}

ncclResult_t group_end() {
  if (t_group.depth == 0) {
    return fail(nullptr, "ncclGroupEnd",
                std::make_exception_ptr(ApiError(ncclInvalidUsage, "no ncclGroupStart is open on this thread")));
  }
  if (--t_group.depth > 0) return ncclSuccess;
  std::vector<Pending> ops = std::move(t_group.ops);
  std::vector<std::function<ncclResult_t()>> actions = std::move(t_group.actions);
  const ncclResult_t error = t_group.error;
  t_group = GroupState{};
  if (error != ncclSuccess) {
    // The failed call recorded its text; nothing of this group runs.
    release(ops);
    return error;
  }
  const ncclResult_t ops_result = run_ops(ops);
  release(ops);
  const ncclResult_t actions_result = run_actions(actions);
  return ops_result != ncclSuccess ? ops_result : actions_result;
}

}  // namespace fsdp::nccl
