// mpi-native: Open MPI's own collectives, the peer every HPC user knows. Only under mpirun (Open MPI
// starts its ranks itself); MPI is initialised on first use and finalised at exit.
//
// Open MPI has no 16- or 8-bit float types: they move as opaque 2- or 1-byte elements and reduce
// through user-defined operators (peer_reduce.h). It has no average either: MPI_SUM, then a local
// divide. MPI_Bcast is in place only: out of place, the root copies send into recv first.
// The C API only: keep Open MPI's deprecated C++ bindings out.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "bench/fsdp_bench/backends.h"
#include "bench/fsdp_bench/peer_reduce.h"

namespace fsdp::bench {
namespace {

template <DataType T, ReduceKind K>
void user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_elements(inout, in, static_cast<size_t>(*len), T, K);
}

struct UserFunction {
  template <DataType T, ReduceKind K>
  static MPI_User_function* fn() {
    return &user_reduce<T, K>;
  }
};

MPI_Datatype native_type(DataType t) {
  switch (t) {
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUint8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kUint32: return MPI_UINT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kUint64: return MPI_UINT64_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string(what) + " failed: " + std::string(text, len));
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

class MpiBackend final : public Backend {
 public:
  MpiBackend() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    version_ = std::string(version, len);
    version_ = version_.substr(0, version_.find_first_of(",\n"));
  }
  ~MpiBackend() override {
    for (auto& [key, type] : types_) MPI_Type_free(&type);
    for (auto& [key, op] : ops_) MPI_Op_free(&op);
  }

  std::string name() const override { return "mpi-native"; }
  std::string describe() const override {
    const char* pml = std::getenv("OMPI_MCA_pml");
    return version_ + " collectives (MPI_Allgather, MPI_Reduce_scatter_block, MPI_Allreduce, ...), pml " +
           (pml ? pml : "default");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string unsupported(Collective, DataType, ReduceKind, bool) const override { return {}; }

  void start(const CallArgs& a) override {
    const MPI_Datatype dt = type(a.type);
    const MPI_Op op = reduction(a.type, a.op);
    const int count = static_cast<int>(a.param_count);
    const size_t elem = element_size(a.type);
    void* in_place = MPI_IN_PLACE;
    switch (a.collective) {
      case Collective::kAllGather:
        check(MPI_Allgather(a.in_place ? in_place : a.send, count, dt, a.recv, count, dt, MPI_COMM_WORLD),
              "MPI_Allgather");
        break;
      case Collective::kReduceScatter:
        // In place, MPI reduces the whole buffer and leaves this rank's block at its start.
        check(MPI_Reduce_scatter_block(a.in_place ? in_place : a.send,
                                       a.in_place ? const_cast<std::byte*>(a.send) : a.recv, count, dt, op,
                                       MPI_COMM_WORLD),
              "MPI_Reduce_scatter_block");
        if (a.op == ReduceKind::kAvg) divide_elements(result_of(a), a.param_count, a.type, size_);
        break;
      case Collective::kAllReduce:
        check(MPI_Allreduce(a.in_place ? in_place : a.send, a.recv, count, dt, op, MPI_COMM_WORLD), "MPI_Allreduce");
        if (a.op == ReduceKind::kAvg) divide_elements(a.recv, a.param_count, a.type, size_);
        break;
      case Collective::kBroadcast:
        if (rank_ == a.root && !a.in_place) std::memcpy(a.recv, a.send, a.param_count * elem);
        check(MPI_Bcast(a.recv, count, dt, a.root, MPI_COMM_WORLD), "MPI_Bcast");
        break;
      case Collective::kReduce: {
        const void* send = a.in_place && rank_ == a.root ? in_place : a.send;
        check(MPI_Reduce(send, a.recv, count, dt, op, a.root, MPI_COMM_WORLD), "MPI_Reduce");
        if (a.op == ReduceKind::kAvg && rank_ == a.root) divide_elements(a.recv, a.param_count, a.type, size_);
        break;
      }
      case Collective::kSendRecv:
        check(MPI_Sendrecv(a.send, count, dt, (rank_ + 1) % size_, 0, a.recv, count, dt, (rank_ - 1 + size_) % size_, 0,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
        break;
      case Collective::kAllToAll:
        check(MPI_Alltoall(a.send, count, dt, a.recv, count, dt, MPI_COMM_WORLD), "MPI_Alltoall");
        break;
    }
  }
  void wait_all() override {}

  const std::byte* result(const CallArgs& a, size_t) const override { return result_of(a); }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  void combine(double* values, int count, Combine how) override {
    const MPI_Op op = how == Combine::kSum ? MPI_SUM : how == Combine::kMin ? MPI_MIN : MPI_MAX;
    check(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, op, MPI_COMM_WORLD), "MPI_Allreduce");
  }

 private:
  static std::byte* result_of(const CallArgs& a) {
    if (a.collective == Collective::kReduceScatter && a.in_place) return const_cast<std::byte*>(a.send);
    return a.recv;
  }

  MPI_Datatype type(DataType t) {
    if (MPI_Datatype native = native_type(t); native != MPI_DATATYPE_NULL) return native;
    auto it = types_.find(t);
    if (it != types_.end()) return it->second;
    MPI_Datatype dt;
    MPI_Type_contiguous(static_cast<int>(element_size(t)), MPI_BYTE, &dt);
    MPI_Type_commit(&dt);
    return types_[t] = dt;
  }

  MPI_Op reduction(DataType t, ReduceKind k) {
    if (native_type(t) != MPI_DATATYPE_NULL) {
      switch (k) {
        case ReduceKind::kProd: return MPI_PROD;
        case ReduceKind::kMax: return MPI_MAX;
        case ReduceKind::kMin: return MPI_MIN;
        default: return MPI_SUM;  // avg: sum, then divide
      }
    }
    const ReduceKind kind = k == ReduceKind::kAvg ? ReduceKind::kSum : k;
    const auto key = std::make_pair(t, kind);
    auto it = ops_.find(key);
    if (it != ops_.end()) return it->second;
    MPI_Op op;
    MPI_Op_create(dispatch_reduction<UserFunction>(t, kind), 1, &op);
    return ops_[key] = op;
  }

  int rank_ = 0, size_ = 1;
  std::string version_;
  std::map<DataType, MPI_Datatype> types_;
  std::map<std::pair<DataType, ReduceKind>, MPI_Op> ops_;
};

}  // namespace

MadeBackend make_mpi_native_backend(BackendContext& ctx) {
  MadeBackend made;
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) {
    made.unavailable = "not started by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE is unset)";
    return made;
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Serialized, not multiple: the runner calls MPI from one thread, and Open MPI's
    // MPI_THREAD_MULTIPLE paths take locks that would slow the peer down.
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
  }
  auto backend = std::make_unique<MpiBackend>();
  if (backend->size() != ctx.env.world_size || backend->rank() != ctx.env.rank) {
    made.unavailable = "MPI_COMM_WORLD (rank " + std::to_string(backend->rank()) + " of " +
                       std::to_string(backend->size()) + ") is not this job (rank " + std::to_string(ctx.env.rank) +
                       " of " + std::to_string(ctx.env.world_size) + ")";
    return made;
  }
  made.backend = std::move(backend);
  return made;
}

}  // namespace fsdp::bench
