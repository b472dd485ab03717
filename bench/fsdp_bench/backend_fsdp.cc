// Our collectives: a Communicator over the transport launch::connect_world builds for a name.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/fsdp_bench/backends.h"
#include "collectives/quantized.h"
#include "collectives/transports/mpi_launcher.h"
#include "collectives/types/errors.h"
#include "common/knobs.h"

namespace fsdp::bench {
namespace {

class FsdpBackend final : public Backend {
 public:
  FsdpBackend(std::string name, launch::World world, bool mxfp8 = false, size_t window_bytes = 0)
      : name_(std::move(name)), world_(std::move(world)), mxfp8_(mxfp8) {
    if (window_bytes > 0) {  // collective: every rank constructs the backend together
      send_window_ = world_.comm->alloc_window(window_bytes);
      recv_window_ = world_.comm->alloc_window(window_bytes);
    }
  }
  ~FsdpBackend() override {
    if (!world_.comm || world_.comm->rank() != 0) return;
    if (send_window_.data()) {
      std::fprintf(stderr, "fsdp-bench: %s ran %llu collectives over shared windows\n", name_.c_str(),
                   static_cast<unsigned long long>(world_.comm->windowed_collectives()));
    }
  }

  BufferPair registered_buffers() const override {
    return {send_window_.data<std::byte>(), recv_window_.data<std::byte>()};
  }

  std::string name() const override { return name_; }
  std::string describe() const override {
    std::string d = "fsdp Communicator over transport " + world_.transport_name;
    if (world_.transport_name == "shm") {
      d += " (FSDP_SHM_COPY=" + knobs::kShmCopy.get() + ")";
      if (const size_t flag = world_.comm->options().flag_path_bytes) {
        d += "; up to " + std::to_string(flag) + " bytes a rank on the flag path (FSDP_FLAG_PATH_BYTES)";
      }
    }
    if (send_window_.data()) {
      d += send_window_.shared() ? "; buffers in shared windows (-R), collectives over them where every rank's are"
                                 : "; -R: windows not shared (" + send_window_.why_not_shared() + ")";
    }
    if (mxfp8_) {
      d += "; MXFP8 E4M3 on the wire (33/64 of bf16's bytes, quantise and decode timed); busbw counts the "
           "bf16-equivalent bytes, x 0.516 for the bytes sent";
    }
    return d;
  }
  int rank() const override { return world_.comm->rank(); }
  int size() const override { return world_.comm->size(); }

  std::string unsupported(Collective coll, DataType t, ReduceKind, bool) const override {
    if (!mxfp8_) return {};
    if (coll != Collective::kAllGather) return "mxfp8: all_gather only";
    if (t != DataType::kBfloat16 && t != DataType::kFloat32) return "mxfp8: bfloat16 or float data only";
    return {};
  }

  void start(const CallArgs& a) override {
    Communicator& c = *world_.comm;
    if (mxfp8_) {
      // This rank's shard quantised into its slot, the slots all-gathered as bytes; decoded in wait_all().
      wire_.resize(mx::slot_bytes(a.param_count) * c.size());
      works_.push_back(c.all_gather(a.send, wire_.data(), a.param_count, a.type, Wire::mxfp8(mx::Format{})));
      decodes_.push_back(a);
      return;
    }
    const ReduceOp op{a.op, 1.0};
    switch (a.collective) {
      case Collective::kAllGather: works_.push_back(c.all_gather(a.send, a.recv, a.param_count, a.type)); break;
      case Collective::kReduceScatter:
        works_.push_back(c.reduce_scatter(a.send, a.recv, a.param_count, a.type, op));
        break;
      case Collective::kAllReduce: works_.push_back(c.all_reduce(a.send, a.recv, a.param_count, a.type, op)); break;
      case Collective::kBroadcast: works_.push_back(c.broadcast(a.send, a.recv, a.param_count, a.type, a.root)); break;
      case Collective::kReduce: works_.push_back(c.reduce(a.send, a.recv, a.param_count, a.type, op, a.root)); break;
      case Collective::kSendRecv: {
        const int n = c.size(), r = c.rank();
        works_.push_back(c.send(a.send, a.param_count, a.type, (r + 1) % n));
        works_.push_back(c.recv(a.recv, a.param_count, a.type, (r - 1 + n) % n));
        break;
      }
      case Collective::kAllToAll: works_.push_back(c.all_to_all(a.send, a.recv, a.param_count, a.type)); break;
    }
  }

  void wait_all() override {
    for (Work& w : works_) w.wait();
    works_.clear();
    for (const CallArgs& a : decodes_) {
      mx::finish_all_gather(wire_.data(), a.param_count, world_.comm->size(), mx::Format{}.element, a.recv, a.type);
    }
    decodes_.clear();
  }

  void barrier() override { world_.comm->barrier().wait(); }
  launch::World& world() { return world_; }
  void combine(double* values, int count, Combine how) override {
    const ReduceKind k = how == Combine::kSum ? ReduceKind::kSum : how == Combine::kMin ? ReduceKind::kMin : ReduceKind::kMax;
    world_.comm->all_reduce(values, values, count, DataType::kFloat64, ReduceOp{k, 1.0}).wait();
  }

 private:
  std::string name_;
  launch::World world_;
  std::vector<Work> works_;
  bool mxfp8_ = false;
  std::vector<uint8_t> wire_;        // mxfp8: every rank's slot (calls in flight share it, as they share recv)
  std::vector<CallArgs> decodes_;    // mxfp8: calls started since the last wait_all
  Window send_window_;               // -R: the send and receive buffers, shared with the peers
  Window recv_window_;
};

}  // namespace

launch::World connect_world_as(const std::string& suffix, const launch::ProcessEnv& env, launch::WorldOptions options) {
  options.key_prefix = launch::job_key_prefix(suffix);
  return launch::connect_world(env, options);
}

std::unique_ptr<Backend> make_control_backend(const launch::ProcessEnv& env, launch::KeyValueStore** store,
                                              std::string* store_prefix) {
  launch::WorldOptions options;
  options.transport = "auto";
  auto control = std::make_unique<FsdpBackend>("control", connect_world_as("bench", env, options));
  *store = control->world().store.get();
  *store_prefix = control->world().key_prefix;
  return control;
}

MadeBackend make_fsdp_backend(const std::string& transport, BackendContext& ctx, bool mxfp8) {
  MadeBackend made;
  if (transport == "mpi" && ctx.env.world_size > 1 && !started_by_mpi_launcher()) {
    // Said here rather than by connect_world, whose ranks would fail at different steps of the
    // rendezvous, one waiting out its timeout for the other.
    made.unavailable = "the mpi transport needs ranks started by mpirun";
    return made;
  }
  launch::WorldOptions options;
  options.transport = transport;
  // A rank that fails to connect leaves the others waiting at most this long.
  options.rendezvous_timeout = std::min<std::chrono::milliseconds>(options.rendezvous_timeout, std::chrono::seconds(60));
  try {
    const std::string name = mxfp8 ? transport + std::string(kMxfp8Suffix) : transport;
    made.backend = std::make_unique<FsdpBackend>(name, connect_world_as("bench-" + name, ctx.env, options), mxfp8,
                                                 mxfp8 ? 0 : ctx.window_bytes);
  } catch (const std::exception& e) {
    // A transport connect_world does not know (yet), or one that cannot start here: the table says
    // why, and the run goes on with the next backend once every rank agrees (main.cc).
    made.unavailable = e.what();
  }
  return made;
}

}  // namespace fsdp::bench
