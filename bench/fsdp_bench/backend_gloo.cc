// gloo: Debian's libgloo, the collectives PyTorch's CPU backend runs, over Gloo's TCP device (on
// 127.0.0.1 when every rank shares the host). Ranks meet through the control job's store.
//
// Gloo's collectives: allgather (ring), allreduce (ring by default), broadcast, reduce, alltoall,
// barrier from its options API; reduce-scatter from the ReduceScatterHalvingDoubling algorithm
// object, which reduces in place, so out of place it runs on the send buffer and copies this rank's
// block to recv. Elements are opaque storage of the right width; reductions go through functions
// of ours (peer_reduce.h), so every type works. Average is sum, then a local divide.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <cstring>

#include "bench/fsdp_bench/backends.h"
#include "bench/fsdp_bench/peer_reduce.h"
#include "launch/store.h"

namespace fsdp::bench {
namespace {

// Gloo's Store interface over our rendezvous store, under a prefix of the control job's keys.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(launch::KeyValueStore& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = store_.get(prefix_ + key);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    store_.wait(full, timeout);
  }

 private:
  launch::KeyValueStore& store_;
  std::string prefix_;
};

// Calls fn with a null pointer of the unsigned type as wide as the element: the storage Gloo's
// typed setters and algorithm templates see.
template <typename Fn>
void with_storage(size_t elem, Fn&& fn) {
  switch (elem) {
    case 1: fn(static_cast<uint8_t*>(nullptr)); break;
    case 2: fn(static_cast<uint16_t*>(nullptr)); break;
    case 4: fn(static_cast<uint32_t*>(nullptr)); break;
    default: fn(static_cast<uint64_t*>(nullptr)); break;
  }
}

template <typename S, DataType T, ReduceKind K>
void storage_reduce(S* x, const S* y, size_t n) {
  reduce_elements(x, y, n, T, K);
}

// The ReductionFunction object of ReduceScatterHalvingDoubling for (type, kind), one per pair.
struct HalvingDoublingFunction {
  template <DataType T, ReduceKind K>
  static const void* fn() {
    const size_t elem = element_size(T);
    const void* out = nullptr;
    with_storage(elem, [&](auto* tag) {
      using S = std::remove_pointer_t<decltype(tag)>;
      static const gloo::ReductionFunction<S> f(gloo::CUSTOM, &storage_reduce<S, T, K>);
      out = &f;
    });
    return out;
  }
};

class GlooBackend final : public Backend {
 public:
  GlooBackend(std::shared_ptr<gloo::rendezvous::Context> context, std::string host)
      : context_(std::move(context)), host_(std::move(host)) {}

  std::string name() const override { return "gloo"; }
  std::string describe() const override {
    return "Debian libgloo collectives over its TCP device on " + host_ +
           " (reduce_scatter: ReduceScatterHalvingDoubling; allreduce: ring)";
  }
  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string unsupported(Collective, DataType, ReduceKind, bool) const override { return {}; }

  void setup(const CallArgs& a) override {
    scatter_ = nullptr;
    if (a.collective != Collective::kReduceScatter) return;
    const int n = size();
    const ReduceKind kind = a.op == ReduceKind::kAvg ? ReduceKind::kSum : a.op;
    std::byte* buf = const_cast<std::byte*>(a.send);  // reduced in place, out of place too
    with_storage(element_size(a.type), [&](auto* tag) {
      using S = std::remove_pointer_t<decltype(tag)>;
      auto* fn = static_cast<const gloo::ReductionFunction<S>*>(dispatch_reduction<HalvingDoublingFunction>(a.type, kind));
      auto algorithm = std::make_shared<gloo::ReduceScatterHalvingDoubling<S>>(
          context_, std::vector<S*>{reinterpret_cast<S*>(buf)}, static_cast<int>(a.param_count * n),
          std::vector<int>(n, static_cast<int>(a.param_count)), fn);
      scatter_ = [algorithm] { algorithm->run(); };
    });
  }

  void start(const CallArgs& a) override {
    const size_t elem = element_size(a.type);
    const size_t count = a.param_count;
    const int n = size(), r = rank();
    const ReduceKind kind = a.op == ReduceKind::kAvg ? ReduceKind::kSum : a.op;
    // Gloo's c = x op y, where c may alias either operand (the ops are commutative).
    auto reduce_fn = [type = a.type, kind](void* c, const void* x, const void* y, size_t len) {
      if (c == y) std::swap(x, y);
      if (c != x) std::memcpy(c, x, len * element_size(type));
      reduce_elements(c, y, len, type, kind);
    };
    void* send = const_cast<std::byte*>(a.send);
    with_storage(elem, [&](auto* tag) {
      using S = std::remove_pointer_t<decltype(tag)>;
      S* in = static_cast<S*>(send);
      S* out = reinterpret_cast<S*>(a.recv);
      switch (a.collective) {
        case Collective::kAllGather: {
          gloo::AllgatherOptions o(context_);
          if (!a.in_place) o.setInput(in, count);
          o.setOutput(out, count * n);
          gloo::allgather(o);
          break;
        }
        case Collective::kReduceScatter:
          scatter_();
          if (!a.in_place) std::memcpy(a.recv, a.send + r * count * elem, count * elem);
          break;
        case Collective::kAllReduce: {
          gloo::AllreduceOptions o(context_);
          if (!a.in_place) o.setInput(in, count);
          o.setOutput(out, count);
          o.setReduceFunction(reduce_fn);
          gloo::allreduce(o);
          break;
        }
        case Collective::kBroadcast: {
          gloo::BroadcastOptions o(context_);
          if (r == a.root && !a.in_place) o.setInput(in, count);
          o.setOutput(out, count);
          o.setRoot(a.root);
          gloo::broadcast(o);
          break;
        }
        case Collective::kReduce: {
          gloo::ReduceOptions o(context_);
          if (!a.in_place) o.setInput(in, count);
          o.setOutput(out, count);
          o.setRoot(a.root);
          o.setReduceFunction(reduce_fn);
          gloo::reduce(o);
          break;
        }
        case Collective::kSendRecv: {
          auto sb = context_->createUnboundBuffer(send, count * elem);
          auto rb = context_->createUnboundBuffer(a.recv, count * elem);
          rb->recv((r - 1 + n) % n, kSendRecvSlot);
          sb->send((r + 1) % n, kSendRecvSlot);
          rb->waitRecv();
          sb->waitSend();
          break;
        }
        case Collective::kAllToAll: {
          gloo::AlltoallOptions o(context_);
          o.setInput(in, count * n);
          o.setOutput(out, count * n);
          gloo::alltoall(o);
          break;
        }
      }
    });
    if (a.op == ReduceKind::kAvg && has_reduction(a.collective)) {
      if (a.collective != Collective::kReduce || r == a.root) divide_elements(a.recv, count, a.type, n);
    }
  }
  void wait_all() override {}

  void barrier() override {
    gloo::BarrierOptions o(context_);
    gloo::barrier(o);
  }
  void combine(double* values, int count, Combine how) override {
    gloo::AllreduceOptions o(context_);
    o.setOutput(values, static_cast<size_t>(count));
    using Fn = void (*)(void*, const void*, const void*, size_t);
    Fn fn = how == Combine::kSum ? Fn(&gloo::sum<double>) : how == Combine::kMin ? Fn(&gloo::min<double>)
                                                                                 : Fn(&gloo::max<double>);
    o.setReduceFunction(fn);
    gloo::allreduce(o);
  }

 private:
  static constexpr uint64_t kSendRecvSlot = 0x5e4d;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::string host_;
  std::function<void()> scatter_;
};

}  // namespace

MadeBackend make_gloo_backend(BackendContext& ctx) {
  MadeBackend made;
  const int rank = ctx.env.rank, n = ctx.env.world_size;
  const bool one_host = ctx.env.local_world_size == n;
  std::string host = "127.0.0.1";
  if (!one_host) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    host = name;
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, n);
    context->setTimeout(std::chrono::seconds(300));
    if (ctx.store) {
      StoreAdapter store(*ctx.store, ctx.store_prefix + "gloo/");
      context->connectFullMesh(store, device);
    } else {
      gloo::rendezvous::HashStore store;
      context->connectFullMesh(store, device);
    }
    made.backend = std::make_unique<GlooBackend>(std::move(context), host);
  } catch (const std::exception& e) {
    made.unavailable = std::string("Gloo could not connect: ") + e.what();
  }
  return made;
}

}  // namespace fsdp::bench
