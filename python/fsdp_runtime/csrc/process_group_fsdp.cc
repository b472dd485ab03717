#include "python/fsdp_runtime/csrc/process_group_fsdp.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>

#include "collectives/types/errors.h"
#include "common/knobs.h"
#include "launch/bootstrap.h"
#include "python/fsdp_runtime/csrc/store_adapters.h"

namespace fsdp::torch_backend {
namespace {

using std::chrono::milliseconds;

// The handle torch gets back: the runtime's Work(s) of one op, the tensors they read and write (kept
// alive until completion) and what to do once they finished (copy-out of list ops).
class FsdpWork : public c10d::Work {
 public:
  FsdpWork(int rank, c10d::OpType type, std::string what, std::vector<fsdp::Work> parts, std::vector<at::Tensor> outputs,
           std::vector<at::Tensor> keep_alive, std::function<void()> after, std::optional<milliseconds> timeout,
           Communicator* comm)
      : c10d::Work(rank, type),
        what_(std::move(what)),
        parts_(std::move(parts)),
        outputs_(std::move(outputs)),
        keep_alive_(std::move(keep_alive)),
        after_(std::move(after)),
        timeout_(timeout),
        comm_(comm) {}

  // The buffers must outlive the operation: finish it (errors were either reported or are moot).
  ~FsdpWork() override {
    try {
      finish(timeout_);
    } catch (...) {
    }
  }

  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return true;
    try {
      for (const fsdp::Work& p : parts_)
        if (!p.test()) return false;
    } catch (...) {
      // Failed: completed, and wait() reports it.
    }
    return true;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_ && !error_;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  std::vector<at::Tensor> result() override { return outputs_; }

  // kNoTimeout (0): the op's timeout, else the group's, which the progress engine enforces on every peer wait (its
  // error names the peer); a shorter explicit one gives up sooner and aborts the communicator.
  bool wait(milliseconds timeout) override {
    finish(timeout == ::kNoTimeout ? timeout_ : std::optional<milliseconds>(timeout));
    if (error_) std::rethrow_exception(error_);
    return true;
  }

  // DDP's reducer and comm hooks chain on a future: finish the op, then hand back a completed one.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    finish(timeout_);
    if (error_) {
      future->setError(error_);
    } else {
      future->markCompleted(c10::IValue(outputs_));
    }
    return future;
  }

 private:
  void finish(std::optional<milliseconds> timeout) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    try {
      const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(milliseconds(0));
      for (const fsdp::Work& p : parts_) {
        if (!timeout) {
          p.wait();
          continue;
        }
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
        p.wait(std::max(left, milliseconds(1)));
      }
      if (after_) after_();
    } catch (const TimeoutError& e) {
      // The op would go on writing into tensors torch may free: stop the communicator, then report.
      comm_->abort("fsdp backend: " + what_ + " timed out");
      error_ = std::make_exception_ptr(std::runtime_error("fsdp backend: " + what_ + ": " + e.what()));
    } catch (const std::exception& e) {
      error_ = std::make_exception_ptr(std::runtime_error("fsdp backend: " + what_ + ": " + e.what()));
    }
    done_ = true;
    parts_.clear();
    keep_alive_.clear();
    after_ = nullptr;
  }

  std::string what_;
  std::vector<fsdp::Work> parts_;
  std::vector<at::Tensor> outputs_, keep_alive_;
  std::function<void()> after_;
  std::optional<milliseconds> timeout_;  // the op's own (opts.timeout); none: the group's, enforced by the engine
  Communicator* comm_;
  bool done_ = false;
  std::exception_ptr error_;
};

// --- Checks: every refusal names the op, the argument and what was expected ----------------------------

DataType data_type_of(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBfloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUint8;
    case at::kBool: return DataType::kUint8;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    default:
      TORCH_CHECK_TYPE(false, "fsdp backend: ", op, ": unsupported dtype ", t.scalar_type(),
                       " (float32, float64, float16, bfloat16, int8, uint8, int32, int64 and bool are)");
  }
}

void check_tensor(const at::Tensor& t, const char* op, const char* what) {
  TORCH_CHECK_VALUE(t.defined(), "fsdp backend: ", op, ": ", what, " is undefined");
  TORCH_CHECK_VALUE(t.device().is_cpu(), "fsdp backend: ", op, ": ", what, " is on ", t.device(),
                    "; only CPU tensors are supported");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "fsdp backend: ", op, ": ", what, " is not a dense tensor");
  TORCH_CHECK_VALUE(t.is_contiguous(), "fsdp backend: ", op, ": ", what,
                    " is not contiguous (sizes ", t.sizes(), ", strides ", t.strides(), "); call .contiguous()");
  data_type_of(t, op);
}

const at::Tensor& single(std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "fsdp backend: ", op, " takes exactly one tensor per rank, got ",
                    tensors.size());
  check_tensor(tensors[0], op, "the tensor");
  return tensors[0];
}

void check_same(const at::Tensor& t, const at::Tensor& like, int64_t numel, const char* op, const char* what) {
  check_tensor(t, op, what);
  TORCH_CHECK_TYPE(t.scalar_type() == like.scalar_type(), "fsdp backend: ", op, ": ", what, " is ", t.scalar_type(),
                   " but the input is ", like.scalar_type());
  TORCH_CHECK_VALUE(t.numel() == numel, "fsdp backend: ", op, ": ", what, " has ", t.numel(), " elements, expected ",
                    numel);
}

ReduceOp reduce_op_of(const c10d::ReduceOp& op, const at::Tensor& t, const char* name) {
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      TORCH_CHECK_VALUE(!is_bool, "fsdp backend: ", name, ": SUM of bool tensors is not supported (use MAX for or)");
      return ReduceOp::sum();
    case c10d::ReduceOp::AVG: return {ReduceKind::kAvg, 1.0};
    case c10d::ReduceOp::PRODUCT: return {ReduceKind::kProd, 1.0};
    case c10d::ReduceOp::MIN: return {ReduceKind::kMin, 1.0};
    case c10d::ReduceOp::MAX: return {ReduceKind::kMax, 1.0};
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK_VALUE(s && s->tensor_factors.empty(), "fsdp backend: ", name,
                        ": PREMUL_SUM takes a Python scalar factor here, not a tensor");
      return ReduceOp::premul_sum(s->double_factor);
    }
    default:
      TORCH_CHECK_VALUE(false, "fsdp backend: ", name, ": reduce op ", static_cast<int>(op.op_),
                        " (BAND/BOR/BXOR) is not supported; SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM are");
  }
}

size_t count_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }
size_t bytes_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

}  // namespace

ProcessGroupFsdp::ProcessGroupFsdp(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   milliseconds timeout)
    : c10d::ProcessGroup(rank, size), timeout_(timeout) {
  // Who we are comes from torch; MASTER_ADDR/PORT (when set) only tell which local address faces the
  // other hosts. The group's members are the job: local rank and size are measured at rendezvous.
  launch::BootstrapOverrides o;
  o.rank = rank;
  o.world_size = size;
  o.local_rank = rank;
  o.local_world_size = size;
  const launch::ProcessEnv env = launch::detect_process_env(o);
  launch::WorldOptions options;
  options.store = as_key_value_store(store);
  options.key_prefix = "fsdp/";
  // The start-up waits for ranks that may start seconds apart (torch's import): FSDP_RENDEZVOUS_TIMEOUT_SEC
  // bounds it when set, as the rendezvous' own error advises; else the group's timeout, as in torch's
  // backends. A short timeout meant to catch a lost peer quickly need not cut the start-up short.
  options.rendezvous_timeout = knobs::kRendezvousTimeoutSec.is_set() ? launch::rendezvous_timeout_from_env() : timeout;
  options.comm.timeout = timeout;
  world_ = std::make_shared<launch::World>(launch::connect_world(env, options));
  comm_ = world_->comm.get();
}

ProcessGroupFsdp::ProcessGroupFsdp(std::shared_ptr<launch::World> world, std::unique_ptr<Communicator> shrunk,
                                   milliseconds timeout)
    : c10d::ProcessGroup(shrunk->rank(), shrunk->size()),
      world_(std::move(world)),
      shrunk_(std::move(shrunk)),
      comm_(shrunk_.get()),
      timeout_(timeout) {}

// The shrunk communicator goes before the world whose transport it runs on; the world's shutdown (a
// barrier over every rank it started with, or an abort after a failure) runs when its last group goes.
ProcessGroupFsdp::~ProcessGroupFsdp() {
  shrunk_.reset();
  world_.reset();
}

c10::intrusive_ptr<ProcessGroupFsdp> ProcessGroupFsdp::shrink(const std::vector<int>& excluded, bool abort) {
  shrink_survivors(size_, rank_, excluded);  // InvalidArgument naming the entry, before anything changes
  // What the parent still has in flight fails now (a wait on another thread returns); the parent stays
  // broken, and its teardown aborts instead of waiting on anyone. Not behind calls_mu_: a call blocked
  // on another thread while holding it (a first collective's set-up exchange) is what the abort ends.
  if (abort) this->abort("fsdp backend: the group was aborted by shrink_group(SHRINK_ABORT)");
  std::lock_guard turn(calls_mu_);
  return c10::make_intrusive<ProcessGroupFsdp>(world_, comm_->shrink(excluded), timeout_);
}

// Neither takes calls_mu_: both are safe beside a call in progress, which may be blocked holding it.
void ProcessGroupFsdp::abort(const std::string& why) { comm_->abort(why); }

std::optional<Communicator::LostPeer> ProcessGroupFsdp::lost_peer() { return comm_->lost_peer(); }

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::make_work(c10d::OpType type, std::string what,
                                                           std::vector<fsdp::Work> parts,
                                                           std::vector<at::Tensor> outputs,
                                                           std::vector<at::Tensor> keep_alive,
                                                           std::function<void()> after, milliseconds timeout) {
  return c10::make_intrusive<FsdpWork>(
      rank_, type, std::move(what), std::move(parts), std::move(outputs), std::move(keep_alive), std::move(after),
      timeout == c10d::kUnsetTimeout ? std::nullopt : std::optional<milliseconds>(timeout), comm_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_, "fsdp backend: broadcast: root ", opts.rootRank,
                    " outside the group of ", size_);
  std::lock_guard turn(calls_mu_);
  auto w = comm_->broadcast(t.data_ptr(), t.data_ptr(), count_of(t), data_type_of(t, "broadcast"),
                            static_cast<int>(opts.rootRank));
  return make_work(c10d::OpType::BROADCAST, "broadcast", {w}, tensors, {}, nullptr, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, "allreduce");
  const ReduceOp op = reduce_op_of(opts.reduceOp, t, "allreduce");
  std::lock_guard turn(calls_mu_);
  auto w = comm_->all_reduce(t.data_ptr(), t.data_ptr(), count_of(t), data_type_of(t, "allreduce"), op);
  return make_work(c10d::OpType::ALLREDUCE, "allreduce", {w}, tensors, {}, nullptr, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_, "fsdp backend: reduce: root ", opts.rootRank,
                    " outside the group of ", size_);
  const ReduceOp op = reduce_op_of(opts.reduceOp, t, "reduce");
  std::lock_guard turn(calls_mu_);
  auto w = comm_->reduce(t.data_ptr(), t.data_ptr(), count_of(t), data_type_of(t, "reduce"), op,
                         static_cast<int>(opts.rootRank));
  return make_work(c10d::OpType::REDUCE, "reduce", {w}, tensors, {}, nullptr, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  check_tensor(input, "all_gather_into_tensor", "the input");
  check_same(output, input, input.numel() * size_, "all_gather_into_tensor", "the output");
  std::lock_guard turn(calls_mu_);
  auto w = comm_->all_gather(input.data_ptr(), output.data_ptr(), count_of(input),
                             data_type_of(input, "all_gather_into_tensor"));
  return make_work(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {w}, {output}, {input}, nullptr, opts.timeout);
}

// The list form goes through one flat buffer (one collective), copied out into the caller's tensors.
c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  const at::Tensor& input = single(inputs, "all_gather");
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                    "fsdp backend: all_gather: expected one list of ", size_, " output tensors");
  for (const at::Tensor& o : outputs[0]) check_same(o, input, input.numel(), "all_gather", "an output tensor");
  at::Tensor flat = at::empty({static_cast<int64_t>(size_) * input.numel()}, input.options());
  std::lock_guard turn(calls_mu_);
  auto w = comm_->all_gather(input.data_ptr(), flat.data_ptr(), count_of(input), data_type_of(input, "all_gather"));
  std::vector<at::Tensor> outs = outputs[0];
  auto copy_out = [outs, flat]() {
    for (size_t r = 0; r < outs.size(); ++r) outs[r].view({-1}).copy_(flat.narrow(0, r * outs[r].numel(), outs[r].numel()));
  };
  return make_work(c10d::OpType::ALLGATHER, "all_gather", {w}, outs, {input, flat}, copy_out, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  check_tensor(output, "reduce_scatter_tensor", "the output");
  check_same(input, output, output.numel() * size_, "reduce_scatter_tensor", "the input");
  const ReduceOp op = reduce_op_of(opts.reduceOp, input, "reduce_scatter_tensor");
  std::lock_guard turn(calls_mu_);
  auto w = comm_->reduce_scatter(input.data_ptr(), output.data_ptr(), count_of(output),
                                 data_type_of(input, "reduce_scatter_tensor"), op);
  return make_work(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {w}, {output}, {input}, nullptr, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = single(outputs, "reduce_scatter");
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                    "fsdp backend: reduce_scatter: expected one list of ", size_, " input tensors");
  for (const at::Tensor& i : inputs[0]) check_same(i, output, output.numel(), "reduce_scatter", "an input tensor");
  const ReduceOp op = reduce_op_of(opts.reduceOp, output, "reduce_scatter");
  std::vector<at::Tensor> flat_inputs;
  for (const at::Tensor& i : inputs[0]) flat_inputs.push_back(i.view({-1}));
  at::Tensor flat = at::cat(flat_inputs);  // copy-in: the collective reads one buffer
  std::lock_guard turn(calls_mu_);
  auto w = comm_->reduce_scatter(flat.data_ptr(), output.data_ptr(), count_of(output),
                                 data_type_of(output, "reduce_scatter"), op);
  return make_work(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {w}, outputs, {flat}, nullptr, opts.timeout);
}

std::vector<fsdp::Work> ProcessGroupFsdp::exchange(const std::vector<Transfer>& sends,
                                                   const std::vector<Transfer>& recvs) {
  std::lock_guard turn(calls_mu_);
  std::vector<fsdp::Work> parts;
  for (const Transfer& r : recvs) {
    if (r.bytes) parts.push_back(comm_->recv(r.data, r.bytes, DataType::kUint8, r.peer));
  }
  for (const Transfer& s : sends) {
    if (s.bytes) parts.push_back(comm_->send(s.data, s.bytes, DataType::kUint8, s.peer));
  }
  return parts;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  const at::Tensor& input = single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < size_, "fsdp backend: gather: root ", root, " outside the group of ", size_);
  std::vector<Transfer> sends, recvs;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                      "fsdp backend: gather: the root expects one list of ", size_, " output tensors");
    outs = outputs[0];
    for (int r = 0; r < size_; ++r) {
      check_same(outs[r], input, input.numel(), "gather", "an output tensor");
      if (r == root) {
        outs[r].copy_(input.view(outs[r].sizes()));
      } else {
        recvs.push_back({r, outs[r].data_ptr(), bytes_of(outs[r])});
      }
    }
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), "fsdp backend: gather: only the root passes outputs");
    sends.push_back({root, input.data_ptr(), bytes_of(input)});
  }
  return make_work(c10d::OpType::GATHER, "gather", exchange(sends, recvs), outs, {input}, nullptr, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  const at::Tensor& output = single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < size_, "fsdp backend: scatter: root ", root, " outside the group of ", size_);
  std::vector<Transfer> sends, recvs;
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                      "fsdp backend: scatter: the root expects one list of ", size_, " input tensors");
    ins = inputs[0];
    for (int r = 0; r < size_; ++r) {
      check_same(ins[r], output, output.numel(), "scatter", "an input tensor");
      if (r == root) {
        output.copy_(ins[r].view(output.sizes()));
      } else {
        sends.push_back({r, ins[r].data_ptr(), bytes_of(ins[r])});
      }
    }
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), "fsdp backend: scatter: only the root passes inputs");
    recvs.push_back({root, output.data_ptr(), bytes_of(output)});
  }
  return make_work(c10d::OpType::SCATTER, "scatter", exchange(sends, recvs), outputs, ins, nullptr, opts.timeout);
}

// all_to_all_single: dim-0 rows split by the given sizes (empty: equal blocks), one all_to_all_v.
c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& output_splits,
                                                               std::vector<int64_t>& input_splits,
                                                               const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all_single";
  check_tensor(input, op, "the input");
  check_same(output, input, output.numel(), op, "the output");
  auto splits = [&](const at::Tensor& t, std::vector<int64_t> s, const char* what) {
    if (s.empty()) {
      TORCH_CHECK_VALUE(t.dim() > 0 && t.size(0) % size_ == 0, "fsdp backend: ", op, ": ", what, " dim 0 (",
                        t.dim() ? t.size(0) : 0, ") does not split evenly over ", size_, " ranks");
      s.assign(size_, t.size(0) / size_);
    }
    TORCH_CHECK_VALUE(static_cast<int>(s.size()) == size_, "fsdp backend: ", op, ": ", s.size(), " ", what,
                      " split sizes for ", size_, " ranks");
    TORCH_CHECK_VALUE(std::accumulate(s.begin(), s.end(), int64_t{0}) == (t.dim() ? t.size(0) : 0), "fsdp backend: ",
                      op, ": ", what, " split sizes do not add up to dim 0 (", t.dim() ? t.size(0) : 0, ")");
    return s;
  };
  const std::vector<int64_t> in_s = splits(input, input_splits, "input"), out_s = splits(output, output_splits, "output");
  TORCH_CHECK_VALUE(in_s[rank_] == out_s[rank_], "fsdp backend: ", op, ": this rank sends itself ", in_s[rank_],
                    " rows but expects ", out_s[rank_]);
  const size_t row_bytes = input.dim() && input.size(0) ? bytes_of(input) / input.size(0)
                          : output.dim() && output.size(0) ? bytes_of(output) / output.size(0) : 0;
  // In bytes, so every dtype travels; a peer whose split sizes disagree fails both ranks (size mismatch).
  std::vector<size_t> send_counts(size_), send_displs(size_), recv_counts(size_), recv_displs(size_);
  size_t in_off = 0, out_off = 0;
  for (int r = 0; r < size_; ++r) {
    send_displs[r] = in_off;
    recv_displs[r] = out_off;
    send_counts[r] = in_s[r] * row_bytes;
    recv_counts[r] = out_s[r] * row_bytes;
    in_off += send_counts[r];
    out_off += recv_counts[r];
  }
  std::lock_guard turn(calls_mu_);
  auto w = comm_->all_to_all_v(input.data_ptr(), send_counts, send_displs, output.data_ptr(), recv_counts, recv_displs,
                               DataType::kUint8);
  return make_work(c10d::OpType::ALLTOALL_BASE, op, {w}, {output}, {input}, nullptr, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
                    "fsdp backend: all_to_all: expected ", size_, " input and output tensors, got ", inputs.size(),
                    " and ", outputs.size());
  std::vector<Transfer> sends, recvs;
  for (int r = 0; r < size_; ++r) {
    check_tensor(inputs[r], "all_to_all", "an input tensor");
    check_same(outputs[r], inputs[r], outputs[r].numel(), "all_to_all", "an output tensor");
    if (r == rank_) {
      check_same(outputs[r], inputs[r], inputs[r].numel(), "all_to_all", "this rank's output tensor");
      outputs[r].copy_(inputs[r].view(outputs[r].sizes()));
    } else {
      sends.push_back({r, inputs[r].data_ptr(), bytes_of(inputs[r])});
      recvs.push_back({r, outputs[r].data_ptr(), bytes_of(outputs[r])});
    }
  }
  return make_work(c10d::OpType::ALLTOALL, "all_to_all", exchange(sends, recvs), outputs, inputs, nullptr, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::send(std::vector<at::Tensor>& tensors, int dst, int /*tag*/) {
  const at::Tensor& t = single(tensors, "send");
  TORCH_CHECK_VALUE(dst >= 0 && dst < size_ && dst != rank_, "fsdp backend: send: peer ", dst,
                    " is not another rank of the group of ", size_);
  std::lock_guard turn(calls_mu_);
  auto w = comm_->send(t.data_ptr(), count_of(t), data_type_of(t, "send"), dst);
  return make_work(c10d::OpType::SEND, "send to " + std::to_string(dst), {w}, {}, tensors, nullptr, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) {
  const at::Tensor& t = single(tensors, "recv");
  TORCH_CHECK_VALUE(src >= 0 && src < size_ && src != rank_, "fsdp backend: recv: peer ", src,
                    " is not another rank of the group of ", size_);
  std::lock_guard turn(calls_mu_);
  auto w = comm_->recv(t.data_ptr(), count_of(t), data_type_of(t, "recv"), src);
  return make_work(c10d::OpType::RECV, "recv from " + std::to_string(src), {w}, tensors, {}, nullptr, c10d::kUnsetTimeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFsdp::barrier(const c10d::BarrierOptions& opts) {
  std::lock_guard turn(calls_mu_);
  return make_work(c10d::OpType::BARRIER, "barrier", {comm_->barrier()}, {}, {}, nullptr, opts.timeout);
}

}  // namespace fsdp::torch_backend
