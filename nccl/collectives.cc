// The operations: NCCL's collectives over the Communicator's, and all-to-all, gather and scatter as
// grouped sends and receives (what NCCL itself builds them from). Arguments are checked at the call,
// inside a group too, so a bad one fails the group before anything is posted; the communicator checks
// the rest (overlapping buffers, overflowing counts) when the operation is posted.
#include <cstring>
#include <string>
#include <vector>

#include "nccl/comm.h"
#include "nccl/group.h"

namespace fsdp::nccl {
namespace {

void check_buffer(const void* p, size_t count, const char* which) {
  require(p != nullptr || count == 0, std::string(which) + " is NULL with count " + std::to_string(count));
}

void check_rank(int r, const ncclComm* comm, const char* what) {
  require(r >= 0 && r < comm->size,
          std::string(what) + " " + std::to_string(r) + " is outside [0, " + std::to_string(comm->size) + ")");
}

// Checks that comm can run operations, builds its operations with make() (which checks the
// arguments) and hands them to submit(): run now, or queued in the thread's group.
template <class Make>
ncclResult_t issue(ncclComm* comm, const char* fn, Make&& make) noexcept {
  return api_call(comm, fn, [&] {
    usable(comm);
    std::vector<Pending> ops = make();
    for (Pending& p : ops) {
      p.comm = comm;
      p.fn = fn;
    }
    return submit(std::move(ops));
  });
}

Pending post(std::function<Work(Communicator&)> f) { return Pending{nullptr, "", std::move(f)}; }

Pending send_op(const void* buf, size_t count, DataType t, int peer) {
  return post([=](Communicator& c) { return c.send(buf, count, t, peer); });
}
Pending recv_op(void* buf, size_t count, DataType t, int peer) {
  return post([=](Communicator& c) { return c.recv(buf, count, t, peer); });
}

// A root's own block of gather or scatter: a local copy, done when it is issued.
Pending local_copy(void* dst, const void* src, size_t bytes) {
  return post([=](Communicator&) {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
    return Work();
  });
}

const std::byte* at(const void* base, size_t block, int index) {
  return static_cast<const std::byte*>(base) + block * static_cast<size_t>(index);
}
std::byte* at(void* base, size_t block, int index) { return static_cast<std::byte*>(base) + block * static_cast<size_t>(index); }

// ncclAllReduce and ncclReduceScatter: the same arguments, `count` elements received per rank.
using ReductionCall = Work (Communicator::*)(const void*, void*, size_t, DataType, ReduceOp);
ncclResult_t reduction(const char* fn, ReductionCall call, const void* sendbuff, void* recvbuff, size_t count,
                       const ncclDataType_t& datatype, const ncclRedOp_t& op, ncclComm* comm) noexcept {
  return issue(comm, fn, [&] {
    const DataType t = data_type(datatype);
    const ReduceOp o = reduce_op(comm, op, t);
    check_buffer(sendbuff, count, "sendbuff");
    check_buffer(recvbuff, count, "recvbuff");
    return std::vector<Pending>{post([=](Communicator& c) { return (c.*call)(sendbuff, recvbuff, count, t, o); })};
  });
}

// ncclBroadcast and ncclBcast (in place). The type goes by reference: see raw().
ncclResult_t broadcast(const char* fn, const void* sendbuff, void* recvbuff, size_t count, const ncclDataType_t& datatype,
                       int root, ncclComm* comm) noexcept {
  return issue(comm, fn, [&] {
    const DataType t = data_type(datatype);
    check_rank(root, comm, "root");
    if (comm->rank == root) check_buffer(sendbuff, count, "sendbuff");
    check_buffer(recvbuff, count, "recvbuff");
    return std::vector<Pending>{post([=](Communicator& c) { return c.broadcast(sendbuff, recvbuff, count, t, root); })};
  });
}

// ncclGather (gather: every rank's sendbuff to block r of the root's recvbuff) and ncclScatter (block r
// of the root's sendbuff to rank r's recvbuff): the root exchanges one block with every other rank and
// copies its own.
ncclResult_t rooted(const char* fn, const void* sendbuff, void* recvbuff, size_t count, const ncclDataType_t& datatype,
                    int root, ncclComm* comm, bool gather) noexcept {
  return issue(comm, fn, [&] {
    const DataType t = data_type(datatype);
    check_rank(root, comm, "root");
    // Every rank has one block (gather's sendbuff, scatter's recvbuff); the root also has all of them.
    check_buffer(gather ? sendbuff : recvbuff, count, gather ? "sendbuff" : "recvbuff");
    std::vector<Pending> ops;
    if (comm->rank != root) {
      ops.push_back(gather ? send_op(sendbuff, count, t, root) : recv_op(recvbuff, count, t, root));
      return ops;
    }
    check_buffer(gather ? recvbuff : sendbuff, count, gather ? "recvbuff" : "sendbuff");
    const size_t block = count * fsdp::element_size(t);
    for (int p = 0; p < comm->size; ++p) {
      if (p == root) {
        ops.push_back(gather ? local_copy(at(recvbuff, block, p), sendbuff, block)
                             : local_copy(recvbuff, at(sendbuff, block, p), block));
      } else {
        ops.push_back(gather ? recv_op(at(recvbuff, block, p), count, t, p) : send_op(at(sendbuff, block, p), count, t, p));
      }
    }
    return ops;
  });
}

}  // namespace
}  // namespace fsdp::nccl

using namespace fsdp::nccl;
using fsdp::Communicator;
using fsdp::DataType;
using fsdp::ReduceOp;
using fsdp::Work;

extern "C" {

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t) {
  return issue(comm, "ncclAllGather", [&] {
    const DataType t = data_type(datatype);
    check_buffer(sendbuff, sendcount, "sendbuff");
    check_buffer(recvbuff, sendcount, "recvbuff");
    return std::vector<Pending>{
        post([=](Communicator& c) { return c.all_gather(sendbuff, recvbuff, sendcount, t); })};
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  return reduction("ncclReduceScatter", &Communicator::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, comm);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  return reduction("ncclAllReduce", &Communicator::all_reduce, sendbuff, recvbuff, count, datatype, op, comm);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t) {
  return broadcast("ncclBroadcast", sendbuff, recvbuff, count, datatype, root, comm);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t) {
  return broadcast("ncclBcast", buff, buff, count, datatype, root, comm);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t) {
  return issue(comm, "ncclReduce", [&] {
    const DataType t = data_type(datatype);
    const ReduceOp o = reduce_op(comm, op, t);
    check_rank(root, comm, "root");
    check_buffer(sendbuff, count, "sendbuff");
    if (comm->rank == root) check_buffer(recvbuff, count, "recvbuff");
    return std::vector<Pending>{
        post([=](Communicator& c) { return c.reduce(sendbuff, recvbuff, count, t, o, root); })};
  });
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t) {
  return issue(comm, "ncclSend", [&] {
    const DataType t = data_type(datatype);
    check_rank(peer, comm, "peer");
    check_buffer(sendbuff, count, "sendbuff");
    return std::vector<Pending>{send_op(sendbuff, count, t, peer)};
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t) {
  return issue(comm, "ncclRecv", [&] {
    const DataType t = data_type(datatype);
    check_rank(peer, comm, "peer");
    check_buffer(recvbuff, count, "recvbuff");
    return std::vector<Pending>{recv_op(recvbuff, count, t, peer)};
  });
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t) {
  return issue(comm, "ncclAlltoAll", [&] {
    const DataType t = data_type(datatype);
    check_buffer(sendbuff, count, "sendbuff");
    check_buffer(recvbuff, count, "recvbuff");
    require(sendbuff != recvbuff || count == 0, "all-to-all cannot run in place (sendbuff == recvbuff)");
    // The collective (Bruck or pairwise by size); the v-variant is grouped ncclSend/ncclRecv, as in NCCL.
    return std::vector<Pending>{post([=](Communicator& c) { return c.all_to_all(sendbuff, recvbuff, count, t); })};
  });
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t) {
  return rooted("ncclGather", sendbuff, recvbuff, count, datatype, root, comm, true);
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t) {
  return rooted("ncclScatter", sendbuff, recvbuff, count, datatype, root, comm, false);
}

ncclResult_t ncclGroupStart(void) { return group_start(); }
ncclResult_t ncclGroupEnd(void) { return group_end(); }

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t*) {
  return api_call(nullptr, "ncclGroupSimulateEnd", []() -> ncclResult_t {
    throw ApiError(ncclInvalidUsage, "ncclGroupSimulateEnd is not supported (docs/nccl_api.md)");
  });
}

}  // extern "C"
