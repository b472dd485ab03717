// Premul-sum reduction operators: handles ncclNumOps + i into the communicator's table.
#include <string>

#include "nccl/comm.h"
#include "nccl/group.h"

using namespace fsdp::nccl;

extern "C" {

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  return api_call(comm, "ncclRedOpCreatePreMulSum", [&] {
    require(comm != nullptr, "comm is NULL");
    require(op != nullptr, "op is NULL");
    require(scalar != nullptr, "scalar is NULL");
    const int where = raw(residence);
    require(where == ncclScalarDevice || where == ncclScalarHostImmediate,
            "invalid scalar residence " + std::to_string(where));
    UserOp u;
    u.live = true;
    u.type = data_type(datatype);
    u.immediate = where == ncclScalarHostImmediate;
    if (u.immediate) {
      u.scalar = read_scalar(scalar, u.type);
    } else {
      u.where = scalar;
    }
    std::lock_guard<std::mutex> lock(comm->mu);
    size_t index = 0;
    while (index < comm->user_ops.size() && comm->user_ops[index].live) ++index;
    require(index < static_cast<size_t>(ncclMaxRedOp - ncclNumOps), "too many live reduction operators");
    if (index == comm->user_ops.size()) comm->user_ops.push_back(u);
    else comm->user_ops[index] = u;
    *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(index));
    return ncclSuccess;
  });
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return api_call(comm, "ncclRedOpDestroy", [&] {
    require(comm != nullptr, "comm is NULL");
    const int v = raw(op);
    const long index = static_cast<long>(v) - ncclNumOps;
    require(index >= 0, "op " + std::to_string(v) + " is not a handle from ncclRedOpCreatePreMulSum");
    std::lock_guard<std::mutex> lock(comm->mu);
    require(index < static_cast<long>(comm->user_ops.size()) && comm->user_ops[index].live,
            "op " + std::to_string(v) + " is not a live operator of this communicator");
    comm->user_ops[index].live = false;
    return ncclSuccess;
  });
}

}  // extern "C"
