#include "collectives/transports/mpi.h"

#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "collectives/transports/fabric.h"
#include "collectives/transports/fabric_transport.h"
#include "collectives/transports/mpi_launcher.h"
#include "collectives/transports/process_identity.h"
#include "collectives/types/errors.h"

namespace fsdp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kControlTag = 0;  // data tags are the receiver's data ids, 1 .. MPI_TAG_UB
// Teardown gives withdrawn receives this long to report their cancellation.
constexpr auto kTeardownWait = std::chrono::milliseconds(200);

// Process-wide: whether this library initialised MPI (then it finalises at exit), and whether a peer
// was lost or start-up abandoned (then MPI_Finalize, which waits for every process, is skipped).
struct MpiRuntime {
  std::mutex mu;
  bool we_initialized = false;
  std::atomic<bool> abandoned{false};
};
MpiRuntime& runtime() {
  static MpiRuntime r;
  return r;
}

void finalize_at_exit() {
  if (runtime().abandoned.load()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

void ensure_initialized(int rank) {
  const ErrorContext ctx{rank, -1, "mpi_init", 0, 0};
  std::lock_guard lock(runtime().mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw CommError(ctx, "MPI is already finalized in this process; no mpi transport can start");
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    if (!started_by_mpi_launcher()) {
      throw InvalidArgument("rank " + std::to_string(rank) +
                            ": the mpi transport runs inside an MPI job: start the program with mpirun (no "
                            "OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK in the environment)");
    }
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) throw CommError(ctx, "MPI_Init_thread failed: " + mpi_error(rc));
    runtime().we_initialized = true;
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw InvalidArgument("rank " + std::to_string(rank) + ": MPI provides " + thread_level_name(provided) +
                          ", but the mpi transport calls MPI from the progress engine's thread and needs "
                          "MPI_THREAD_SERIALIZED (or MPI_THREAD_MULTIPLE if the program calls MPI itself): "
                          "initialise MPI with MPI_Init_thread");
  }
}

struct MpiOp final : FabricOp {
  int peer = -1;
  bool is_send = false;
  bool control_recv = false;  // a probed control message: next_control hands it over, no callback
  bool mpi_done = false;
  bool cancelled = false;
  int error = MPI_SUCCESS;
  int pieces_left = 0;
  size_t received = 0;
  std::vector<std::byte> buffer;  // a control message, sent or received
};

class MpiFabric final : public Fabric {
 public:
  MpiFabric(int rank, int size, std::chrono::milliseconds timeout, MpiOptions options)
      : max_piece_(options.max_message_bytes) {
    if (max_piece_ < 1 || max_piece_ > static_cast<size_t>(INT32_MAX)) {
      throw InvalidArgument("mpi transport: max_message_bytes must be in [1, INT_MAX]");
    }
    ensure_initialized(rank);
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (rank < 0) {
      rank = world_rank;
      size = world_size;
    }
    if (world_size != size) {
      throw InvalidArgument("rank " + std::to_string(rank) + ": MPI_COMM_WORLD has " + std::to_string(world_size) +
                            " processes but the job has " + std::to_string(size) +
                            " ranks (the mpi transport needs exactly one MPI process per rank)");
    }
    rank_ = rank;
    size_ = size;
    join(Clock::now() + timeout, timeout);
  }

  ~MpiFabric() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || comm_ == MPI_COMM_NULL) return;
    // Withdraw what is still posted (receives cancel; sends that cannot be recalled are let go).
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (!owners_[i]->is_send) MPI_Cancel(&requests_[i]);
    }
    const auto deadline = Clock::now() + kTeardownWait;
    while (!requests_.empty() && Clock::now() < deadline) test_requests();
    for (MPI_Request& r : requests_) MPI_Request_free(&r);
    MPI_Comm_free(&comm_);
  }

  std::string_view name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint64_t max_data_id() const override { return tag_ub_; }

  FabricOpPtr send_control(int peer, std::vector<std::byte> message, FabricCallback done) override {
    auto op = make_op(peer, true, std::move(done));
    op->buffer = std::move(message);
    post(op, op->buffer.data(), op->buffer.size(), kControlTag);
    return op;
  }

  FabricOpPtr send_data(int peer, uint64_t id, const void* data, size_t bytes, FabricCallback done) override {
    auto op = make_op(peer, true, std::move(done));
    post(op, const_cast<void*>(data), bytes, static_cast<int>(id));
    return op;
  }

  FabricOpPtr recv_data(int peer, uint64_t id, void* data, size_t bytes, FabricCallback done) override {
    auto op = make_op(peer, false, std::move(done));
    post(op, data, bytes, static_cast<int>(id));
    return op;
  }

  bool progress() override {
    bool moved = false;
    // Control messages from any peer: MPI keeps each sender's in order.
    for (;;) {
      int flag = 0;
      MPI_Message message;
      MPI_Status status;
      if (MPI_Improbe(MPI_ANY_SOURCE, kControlTag, comm_, &flag, &message, &status) != MPI_SUCCESS || !flag) break;
      moved = true;
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      auto op = make_op(rank_of_[status.MPI_SOURCE], false, nullptr);
      op->control_recv = true;
      // A larger one is not ours: receiving it truncated fails it, and the protocol rejects it.
      op->buffer = std::vector<std::byte>(std::min(static_cast<size_t>(count), kFabricMaxControlBytes));
      MPI_Request request;
      const int rc = MPI_Imrecv(op->buffer.data(), static_cast<int>(op->buffer.size()), MPI_BYTE, &message, &request);
      if (rc == MPI_SUCCESS) {
        add(op, request);
      } else {
        op->error = rc;
        op->mpi_done = true;
      }
      control_inbox_.push_back(op);
    }
    moved |= test_requests();
    while (!finished_.empty()) {
      moved = true;
      for (auto& op : std::exchange(finished_, {})) report(*op);
    }
    return moved;
  }

  bool next_control(int& from, std::vector<std::byte>& message) override {
    if (control_inbox_.empty() || !control_inbox_.front()->mpi_done) return false;
    auto op = std::move(control_inbox_.front());
    control_inbox_.pop_front();
    from = op->peer;
    message = std::move(op->buffer);
    message.resize(op->error == MPI_SUCCESS ? op->received : 0);  // a broken one reaches the protocol empty
    return true;
  }

  void cancel(const FabricOpPtr& op) override {
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (owners_[i].get() == op.get()) MPI_Cancel(&requests_[i]);
    }
  }

  std::string check_peer(int peer) override {
    std::string why = processes_[peer].gone(peer);
    if (!why.empty()) runtime().abandoned = true;
    return why;
  }

 private:
  // Bounded wait for a non-blocking collective of start-up.
  void wait(MPI_Request& request, Clock::time_point deadline, std::chrono::milliseconds timeout, const char* what) {
    for (;;) {
      int flag = 0;
      const int rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        throw CommError(ErrorContext{rank_, -1, "mpi_connect", 0, 0}, std::string(what) + " failed: " + mpi_error(rc));
      }
      if (flag) return;
      if (Clock::now() > deadline) {
        runtime().abandoned = true;  // MPI_Finalize would wait for the processes that never came
        throw TimeoutError(ErrorContext{rank_, -1, "mpi_connect", 0, 0},
                           std::string(what) + " did not complete within " + std::to_string(timeout.count()) +
                               " ms: not every MPI process started the mpi transport (FSDP_TRANSPORT=mpi on "
                               "every rank?)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // Our own communicator, and who is who in it: each process's job rank and identity.
  void join(Clock::time_point deadline, std::chrono::milliseconds timeout) {
    MPI_Request request;
    MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request);
    wait(request, deadline, timeout, "MPI_Comm_idup of MPI_COMM_WORLD");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag);
    tag_ub_ = flag && ub && *ub > 0 ? static_cast<uint64_t>(*ub) : 32767;  // the standard's minimum

    struct Entry {
      int32_t rank;
      int32_t reserved;
      ProcessIdentity process;
    };
    const Entry mine{rank_, 0, ProcessIdentity::self()};
    std::vector<Entry> all(size_);
    MPI_Iallgather(&mine, sizeof(Entry), MPI_BYTE, all.data(), sizeof(Entry), MPI_BYTE, comm_, &request);
    wait(request, deadline, timeout, "MPI_Iallgather of ranks");
    mpi_of_.assign(size_, -1);
    rank_of_.assign(size_, -1);
    processes_.resize(size_);
    for (int m = 0; m < size_; ++m) {
      const int r = all[m].rank;
      if (r < 0 || r >= size_ || mpi_of_[r] != -1) {
        throw CommError(ErrorContext{rank_, -1, "mpi_connect", 0, 0},
                        "MPI process " + std::to_string(m) + " claims rank " + std::to_string(r) +
                            (r >= 0 && r < size_ ? " like MPI process " + std::to_string(mpi_of_[r])
                                                 : " of " + std::to_string(size_)) +
                            " (the ranks passed to the transport must be 0 .. size-1, once each)");
      }
      mpi_of_[r] = m;
      rank_of_[m] = r;
      processes_[r] = all[m].process;
    }
  }

  std::shared_ptr<MpiOp> make_op(int peer, bool is_send, FabricCallback done) {
    auto op = std::make_shared<MpiOp>();
    op->peer = peer;
    op->is_send = is_send;
    op->done = std::move(done);
    return op;
  }

  // Posts `bytes` as messages of at most max_piece_ under one tag; MPI matches them in order.
  void post(const std::shared_ptr<MpiOp>& op, void* data, size_t bytes, int tag) {
    auto* p = static_cast<std::byte*>(data);
    size_t offset = 0;
    do {
      const int count = static_cast<int>(std::min(bytes - offset, max_piece_));
      MPI_Request request;
      const int rc = op->is_send ? MPI_Isend(p + offset, count, MPI_BYTE, mpi_of_[op->peer], tag, comm_, &request)
                                 : MPI_Irecv(p + offset, count, MPI_BYTE, mpi_of_[op->peer], tag, comm_, &request);
      if (rc != MPI_SUCCESS) {
        op->error = rc;
        break;
      }
      add(op, request);
      offset += static_cast<size_t>(count);
    } while (offset < bytes);
    if (op->pieces_left == 0) finish(op);
  }

  void add(const std::shared_ptr<MpiOp>& op, MPI_Request request) {
    requests_.push_back(request);
    owners_.push_back(op);
    ++op->pieces_left;
  }

  // One MPI_Testsome over everything posted. True when anything completed.
  bool test_requests() {
    if (requests_.empty()) return false;
    const int n = static_cast<int>(requests_.size());
    indices_.resize(n);
    statuses_.resize(n);
    int done = 0;
    const int rc = MPI_Testsome(n, requests_.data(), &done, indices_.data(), statuses_.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      // The whole call failed: nothing can be trusted to complete; fail every operation.
      for (size_t i = 0; i < requests_.size(); ++i) {
        owners_[i]->error = rc;
        if (--owners_[i]->pieces_left == 0) finish(owners_[i]);
      }
      requests_.clear();
      owners_.clear();
      return true;
    }
    if (done == MPI_UNDEFINED || done == 0) return false;
    for (int k = 0; k < done; ++k) {
      const int i = indices_[k];
      std::shared_ptr<MpiOp> op = std::move(owners_[i]);
      MPI_Status& status = statuses_[k];
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      if (cancelled) {
        op->cancelled = true;
      } else if (rc == MPI_ERR_IN_STATUS && status.MPI_ERROR != MPI_SUCCESS) {
        op->error = status.MPI_ERROR;
      } else if (!op->is_send) {
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        op->received += static_cast<size_t>(count);
      }
      if (--op->pieces_left == 0) finish(op);
    }
    // Completed requests are MPI_REQUEST_NULL now; keep the rest, in order.
    size_t kept = 0;
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (!owners_[i]) continue;
      requests_[kept] = requests_[i];
      owners_[kept] = std::move(owners_[i]);
      ++kept;
    }
    requests_.resize(kept);
    owners_.resize(kept);
    return true;
  }

  void finish(const std::shared_ptr<MpiOp>& op) {
    op->mpi_done = true;
    if (!op->control_recv) finished_.push_back(op);
  }

  void report(MpiOp& op) {
    FabricResult r;
    r.bytes = op.received;
    r.ok = op.error == MPI_SUCCESS && !op.cancelled;
    if (op.cancelled) {
      r.error = "cancelled";
    } else if (!r.ok) {
      const std::string gone = processes_[op.peer].gone(op.peer);
      r.peer_lost = !gone.empty();
      if (r.peer_lost) runtime().abandoned = true;
      r.error = !gone.empty() ? gone
                              : "MPI " + std::string(op.is_send ? "send to" : "receive from") + " rank " +
                                    std::to_string(op.peer) + " failed: " + mpi_error(op.error);
    }
    op.finished = true;
    if (FabricCallback done = std::move(op.done)) done(r);
  }

  int rank_ = 0;
  int size_ = 0;
  size_t max_piece_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  uint64_t tag_ub_ = 32767;
  std::vector<int> mpi_of_;   // job rank -> rank in comm_
  std::vector<int> rank_of_;  // rank in comm_ -> job rank
  std::vector<ProcessIdentity> processes_;
  // Everything posted, for one MPI_Testsome: request i belongs to owners_[i].
  std::vector<MPI_Request> requests_;
  std::vector<std::shared_ptr<MpiOp>> owners_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
  std::vector<std::shared_ptr<MpiOp>> finished_;      // done, callback not yet run
  std::deque<std::shared_ptr<MpiOp>> control_inbox_;  // probed control messages, in order
};

}  // namespace

std::shared_ptr<Transport> make_mpi_transport(int rank, int size, std::chrono::milliseconds connect_timeout,
                                              MpiOptions options) {
  if (rank >= 0 && (size < 1 || rank >= size)) {
    throw InvalidArgument("mpi transport: rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) + ")");
  }
  return make_fabric_transport(std::make_unique<MpiFabric>(rank, size, connect_timeout, options), connect_timeout);
}

}  // namespace fsdp
