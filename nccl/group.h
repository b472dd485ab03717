// Group semantics (ncclGroupStart / ncclGroupEnd), per thread like NCCL's.
//
// Outside a group an operation is posted to its communicator and waited for before the call returns.
// Inside one, the call checks its arguments and queues the operation; the outermost ncclGroupEnd then
//   1. posts every queued operation in call order (collectives queue behind earlier collectives of
//      their communicator; sends and receives start at once, so any send/recv pattern inside one group
//      cannot deadlock), then waits for all of them;
//   2. runs the queued communicator-management calls (ncclCommInitRank, ncclCommSplit,
//      ncclCommFinalize, ncclCommDestroy), each on its own thread, concurrently: what lets one thread
//      create, split or finalize several ranks of one job.
// If a call inside the group failed (a bad argument), ncclGroupEnd posts nothing and returns that error.
#pragma once

#include <functional>
#include <vector>

#include "collectives/communicator.h"
#include "nccl/api.h"
#include "nccl/comm.h"

namespace fsdp::nccl {

// One operation as the C layer queues it. post() runs when the operation is issued (at the call
// outside a group, at ncclGroupEnd inside one) and returns its Work (an empty Work for a local copy).
struct Pending {
  ncclComm* comm = nullptr;
  const char* fn = "";
  std::function<Work(Communicator&)> post;
};

bool in_group();

// Issues `ops` (one per collective; several for those built from send/recv) and waits for them outside
// a group; queues them inside one. Returns the first error, recorded with its text.
ncclResult_t submit(std::vector<Pending> ops);

// A blocking communicator-management call: runs now outside a group; queued inside one (see above).
// The action records its own errors.
ncclResult_t run_or_defer(std::function<ncclResult_t()> action);

// A call inside the group failed at call time: the group will post nothing and return `code`.
void group_failed(ncclResult_t code);

// Drops the operations this thread's group queued for comm (it is being aborted).
void forget(ncclComm* comm);

ncclResult_t group_start();
ncclResult_t group_end();

// Runs the body of an API call on comm (null allowed; checked by with_handle) with a reference held:
// its result, or the code of what it threw. A call that fails inside a group fails the group.
template <class Body>
ncclResult_t api_call(ncclComm* comm, const char* fn, Body&& body) noexcept {
  const ncclResult_t r = with_handle(comm, fn, body);
  if (r != ncclSuccess) group_failed(r);
  return r;
}

}  // namespace fsdp::nccl
