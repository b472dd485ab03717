#include "sharding/step_program.h"

#include <algorithm>

#include "spec/checked_size.h"
#include "spec/mxfp8_wire.h"

namespace fsdp::sharding {

std::string_view name(SpanKind k) {
  switch (k) {
    case SpanKind::kForward:
      return "forward";
    case SpanKind::kBackward:
      return "backward";
    case SpanKind::kOptimizer:
      return "optimizer";
    case SpanKind::kAllGather:
      return "all_gather";
    case SpanKind::kAllGatherBackward:
      return "all_gather_backward";
    case SpanKind::kReduceScatter:
      return "reduce_scatter";
    case SpanKind::kAllReduce:
      return "all_reduce";
    case SpanKind::kAllToAll:
      return "all_to_all";
    case SpanKind::kStepSync:
      return "step_all_reduce";
    case SpanKind::kMxfp8Codec:
      return "mxfp8_codec";
    case SpanKind::kBuddyExchange:
      return "buddy_exchange";
    case SpanKind::kMirrorUpdate:
      return "mirror_update";
  }
  return "?";
}

bool is_communication(SpanKind k) {
  return k != SpanKind::kForward && k != SpanKind::kBackward && k != SpanKind::kOptimizer &&
         k != SpanKind::kMxfp8Codec && k != SpanKind::kMirrorUpdate;
}

namespace {

// Writes the program while keeping FsdpModel's per-unit state (in flight, unsharded, kept slice,
// unsharded gradients, the pending reduce-scatter) and simulate_memory's byte counts.
class Builder {
 public:
  explicit Builder(const StepSpec& s)
      : s_(s),
        n_(static_cast<int>(s.units.size())),
        pb_(static_cast<int64_t>(element_size(s.policy.param_dtype))),
        cb_(compute_element_bytes(s.policy.param_dtype, s.fp32_compute)),
        rb_(static_cast<int64_t>(element_size(s.policy.reduce_dtype))),
        plain_into_params_(cb_ == pb_ && s.policy.param_comm != spec::CommPrecision::kMxfp8),
        grouped_(s.policy.reshard.mode == spec::Reshard::Mode::kGroup && s.policy.reshard.group < s.shard_degree),
        group_(grouped_ ? s.policy.reshard.group : 1),
        gather_call_(s.units.size(), -1),
        gathering_(s.units.size(), 0),
        unsharded_(s.units.size(), 0),
        kept_(s.units.size(), 0),
        grads_(s.units.size(), 0),
        encoded_(s.units.size(), 0) {}

  Program build() {
    const int64_t accum = std::max<int64_t>(1, s_.policy.grad_accum);
    begin_segment(0);
    receive_buddy_grads();  // the previous step's, live through its optimizer as in every step
    for (int u = 0; u < n_; ++u) optimizer_unit(u);
    update_mirror();
    // The first micro-step runs behind the prefetched all-gathers; the ones without sync in between are
    // alike (each starts cold: nothing was prefetched for it); the last reduces.
    begin_segment(1);
    micro_step(accum == 1);
    if (accum >= 3) {
      begin_segment(accum - 2);
      micro_step(false);
    }
    if (accum >= 2) {
      begin_segment(1);
      micro_step(true);
    }
    begin_buddy_exchange();                           // behind the loss and the norm's reductions
    blocking(s_.step_sync, SpanKind::kStepSync, -1);  // the loss
    blocking(s_.step_sync, SpanKind::kStepSync, -1);  // clip_grad_norm
    end_buddy_exchange();
    for (int u = 0; u < n_; ++u) optimizer_unit(u);
    update_mirror();
    p_.segments.back().end = p_.instructions.size();
    return std::move(p_);
  }

 private:
  void begin_segment(int64_t repeat) {
    if (!p_.segments.empty()) p_.segments.back().end = p_.instructions.size();
    p_.segments.push_back(Segment{p_.instructions.size(), p_.instructions.size(), repeat});
  }

  // BuddyMirror::begin_exchange, end_exchange and apply (runtime/buddy_mirror.h); nothing without buddy
  // redundancy. The exchange sends a packed copy of the rank's own grad shards, freed when it ends; it
  // runs on the progress engine while the step's loss and norm are reduced.
  void receive_buddy_grads() {  // the previous step's, held from its exchange to its update
    if (s_.buddy_grad_bytes <= 0) return;
    buddy_ += s_.buddy_grad_bytes;
    memory();
  }
  void begin_buddy_exchange() {
    if (s_.buddy_grad_bytes <= 0) return;
    buddy_ += 2 * s_.buddy_grad_bytes;
    memory();
    exchange_call_ = call(s_.buddy_exchange, SpanKind::kBuddyExchange, -1);
    if (s_.buddy_exchange.seconds > 0)
      p_.instructions.push_back(
          Instruction{.op = Op::kIssue, .kind = SpanKind::kBuddyExchange, .call = exchange_call_});
  }
  void end_buddy_exchange() {
    if (s_.buddy_grad_bytes <= 0) return;
    if (s_.buddy_exchange.seconds > 0) wait(exchange_call_);
    buddy_ -= s_.buddy_grad_bytes;
    memory();
  }
  void update_mirror() {
    if (s_.buddy_grad_bytes <= 0) return;
    if (s_.mirror_update > 0) compute(SpanKind::kMirrorUpdate, -1, s_.mirror_update);
    buddy_ -= s_.buddy_grad_bytes;
    memory();
  }

  void memory() {
    const int64_t live = s_.base_bytes + ag_ + up_ + kept_bytes_ + ug_ + rs_ + act_ + buddy_;
    MemoryTimeline& m = p_.memory;
    m.peak = std::max(m.peak, live);
    m.all_gather = std::max(m.all_gather, ag_);
    m.unsharded_params = std::max(m.unsharded_params, up_);
    m.kept_params = std::max(m.kept_params, kept_bytes_);
    m.unsharded_grads = std::max(m.unsharded_grads, ug_);
    m.reduce_scatter = std::max(m.reduce_scatter, rs_);
    m.activations = std::max(m.activations, act_);
    p_.instructions.push_back(Instruction{.op = Op::kMemory, .bytes = live});
  }

  void compute(SpanKind kind, int u, double seconds) {
    if (kind == SpanKind::kMxfp8Codec && seconds <= 0) return;
    p_.instructions.push_back(Instruction{.op = Op::kCompute, .kind = kind, .unit = u, .seconds = seconds});
  }

  int call(const SimCollective& c, SpanKind kind, int u) {
    p_.calls.push_back(CollectiveCall{c, kind, u});
    return static_cast<int>(p_.calls.size()) - 1;
  }

  void blocking(const SimCollective& c, SpanKind kind, int u) {
    if (c.seconds <= 0) return;
    p_.instructions.push_back(Instruction{.op = Op::kBlocking, .kind = kind, .unit = u, .call = call(c, kind, u)});
  }

  void wait(int c) { p_.instructions.push_back(Instruction{.op = Op::kWait, .unit = p_.calls[c].unit, .call = c}); }

  const UnitMemory& mem(int u) const { return s_.units[static_cast<size_t>(u)].memory; }

  // MXFP8 wire slots of unit u, one per rank of its group (collectives/quantized.h).
  int64_t wire_bytes(int u) const {
    const int64_t chunk = std::max<int64_t>(mem(u).chunk_numel, 1);
    return spec::mxfp8_wire_bytes(chunk) * (mem(u).flat_numel / chunk);
  }
  // What an all-gather holds in flight: the param-dtype flat buffer; with MXFP8 (but not when gathering a
  // kept slice) only the wire slots, which the copy-out decodes straight into the parameters.
  int64_t gather_bytes(int u, bool from_kept) const {
    if (into_params(u) && !from_kept) return mem(u).chunk_numel * pb_ + mem(u).numel * cb_;
    return s_.policy.param_comm == spec::CommPrecision::kMxfp8 && !from_kept ? wire_bytes(u) : mem(u).flat_numel * pb_;
  }
  bool into_params(int u) const {
    return plain_into_params_ && mem(u).gathers_in_windows && !(grouped_ && mem(u).keeps_group_slice);
  }
  // What a reduce-scatter holds: the flat input in the reduce dtype; with MXFP8 an f32 input plus the
  // sent and the received wire slots.
  int64_t reduce_bytes(int u) const {
    return s_.policy.grad_comm == spec::CommPrecision::kMxfp8 ? mem(u).flat_numel * 4 + 2 * wire_bytes(u)
                                                              : mem(u).flat_numel * rb_;
  }

  // FsdpUnit::start_unshard: allocates the all-gather output and starts the gather (over the group of
  // k when a slice was kept).
  void start_unshard(int u) {
    if (u < 0 || u >= n_ || unsharded_[u] || gather_call_[u] >= 0) return;
    const SimUnit& unit = s_.units[static_cast<size_t>(u)];
    const bool from_kept = kept_[u] != 0;
    const SimCollective& c = from_kept ? unit.all_gather_backward : unit.all_gather;
    if (!from_kept && !encoded_[u]) {  // the first gather since the optimizer quantises the shard
      compute(SpanKind::kMxfp8Codec, u, unit.gather_quantize);
      encoded_[u] = 1;
    }
    gather_call_[u] = call(c, from_kept ? SpanKind::kAllGatherBackward : SpanKind::kAllGather, u);
    if (c.seconds > 0) p_.instructions.push_back(Instruction{.op = Op::kIssue, .unit = u, .call = gather_call_[u]});
    gathering_[u] = gather_bytes(u, from_kept);
    ag_ += gathering_[u];
    memory();
  }

  // FsdpUnit::wait_unshard: waits, copies out, keeps (or drops) the group slice, frees the gather buffer.
  void wait_unshard(int u) {
    if (unsharded_[u]) return;
    start_unshard(u);
    if (p_.calls[gather_call_[u]].collective.seconds > 0) wait(gather_call_[u]);
    if (into_params(u) && !kept_[u]) {  // the parameters it gathered into become the unit's
      ag_ -= mem(u).numel * cb_;
      gathering_[u] -= mem(u).numel * cb_;
    }
    up_ += mem(u).numel * cb_;
    memory();
    const SimUnit& unit = s_.units[static_cast<size_t>(u)];
    const int64_t slice = mem(u).flat_numel / group_ * pb_;
    if (kept_[u]) {  // a plain param-dtype gather inside the group: nothing to decode
      kept_bytes_ -= slice;
      kept_[u] = 0;
    } else {
      compute(SpanKind::kMxfp8Codec, u, unit.gather_decode);  // the copy-out decodes every slot
      if (grouped_ && mem(u).keeps_group_slice) {
        kept_bytes_ += slice;
        kept_[u] = 1;
        memory();
        compute(SpanKind::kMxfp8Codec, u, unit.kept_decode);
      }
    }
    ag_ -= gathering_[u];
    gather_call_[u] = -1;
    unsharded_[u] = 1;
  }

  void release_params(int u) {
    if (!unsharded_[u]) return;
    up_ -= mem(u).numel * cb_;
    unsharded_[u] = 0;
  }

  void optimizer_unit(int u) {
    compute(SpanKind::kOptimizer, u, s_.units[static_cast<size_t>(u)].optimizer);
    encoded_[u] = 0;  // the master changed: its MXFP8 encoding is stale
    if (s_.policy.prefetch > 0 && u <= s_.policy.prefetch) start_unshard(u);  // prefetch_next_step
  }

  void prefetch(int u, int direction) {
    for (int64_t k = 1; k <= s_.policy.prefetch; ++k) start_unshard(u + direction * static_cast<int>(k));
  }

  // FsdpUnit::finish_reduce_grads: the reduce-scatter, then the HSDP all-reduce on the training thread.
  void finish_reduce(int u) {
    if (reduce_call_ >= 0) wait(reduce_call_);
    compute(SpanKind::kMxfp8Codec, u, s_.units[static_cast<size_t>(u)].reduce_decode);
    blocking(s_.units[static_cast<size_t>(u)].all_reduce, SpanKind::kAllReduce, u);
    rs_ -= reduce_bytes(u);
    reduce_call_ = -1;
  }

  void micro_step(bool sync) {
    for (int u = 0; u < n_; ++u) {
      const SimUnit& unit = s_.units[static_cast<size_t>(u)];
      start_unshard(u);
      prefetch(u, +1);
      wait_unshard(u);
      act_ += mem(u).activations + mem(u).forward_scratch;
      memory();
      compute(SpanKind::kForward, u, unit.forward);
      blocking(unit.all_to_all_forward, SpanKind::kAllToAll, u);
      act_ -= mem(u).forward_scratch;
      if (s_.policy.reshard.reshards(u, n_)) release_params(u);
    }
    for (int u = n_ - 1; u >= 0; --u) {
      const SimUnit& unit = s_.units[static_cast<size_t>(u)];
      start_unshard(u);
      prefetch(u, -1);
      wait_unshard(u);
      if (!grads_[u]) {
        ug_ += mem(u).numel * cb_;
        grads_[u] = 1;
        memory();
      }
      act_ += mem(u).backward_scratch;
      memory();
      compute(SpanKind::kBackward, u, unit.backward);
      blocking(unit.all_to_all_backward, SpanKind::kAllToAll, u);
      act_ -= mem(u).backward_scratch + mem(u).activations;
      release_params(u);
      if (!sync) continue;
      if (pending_ >= 0) finish_reduce(pending_);
      rs_ += reduce_bytes(u);
      memory();
      ug_ -= mem(u).numel * cb_;
      grads_[u] = 0;
      compute(SpanKind::kMxfp8Codec, u, unit.reduce_quantize);
      reduce_call_ = call(unit.reduce_scatter, SpanKind::kReduceScatter, u);
      if (unit.reduce_scatter.seconds > 0) {
        p_.instructions.push_back(Instruction{.op = Op::kIssue, .unit = u, .call = reduce_call_});
      } else {
        reduce_call_ = -1;
      }
      pending_ = u;
    }
    if (sync && pending_ >= 0) {  // finalize_backward
      finish_reduce(pending_);
      pending_ = -1;
    }
  }

  const StepSpec& s_;
  const int n_;
  const int64_t pb_, cb_, rb_;
  // FsdpUnit's all-gather lands straight in the full parameters (no rank-major buffer) where they are in
  // the param dtype and the gather is plain (into_params: and over windows, with no group slice kept). In
  // flight it holds this rank's chunk and the full parameters.
  const bool plain_into_params_;
  const bool grouped_;
  const int64_t group_;
  Program p_;
  std::vector<int> gather_call_;  // all-gather in flight per unit, -1 none
  std::vector<int64_t> gathering_;  // bytes that all-gather holds
  std::vector<char> unsharded_, kept_, grads_;
  std::vector<char> encoded_;  // the unit's MXFP8 shard encoding is current (quantised since the optimizer)
  int pending_ = -1;      // unit whose reduce-scatter is pending
  int reduce_call_ = -1;  // its call, -1 when it had nothing to send
  int exchange_call_ = -1;  // the buddy exchange's, in flight over the step's reductions
  int64_t ag_ = 0, up_ = 0, kept_bytes_ = 0, ug_ = 0, rs_ = 0, act_ = 0;
  int64_t buddy_ = 0;  // the buddy's received grad shards (buddy redundancy)
};

}  // namespace

// The most the builder's counters can hold: every unit's gather, unsharded parameters, kept slice,
// gradients, reduce-scatter buffers (16 bytes a flat element bounds them all) and saved activations at
// once, with the largest scratch (one unit's at a time), over the base. Checked once here
// (SizeOverflow), so the counters' sums cannot overflow. Model states of a validated model fit
// (spec::kMaxModelElements); what overflows is activations: the tokens', or the head's (the last unit:
// its logits) when the vocabulary drives them.
void check_live_bytes_fit(const StepSpec& s) {
  const char* tokens = s.policy.seq_len >= s.policy.micro_batch ? "seq_len" : "micro_batch";
  const char* what = "the live bytes of a step";
  const auto driver = [&](size_t unit) { return unit + 1 == s.units.size() && s.units.size() > 1 ? "vocab" : tokens; };
  int64_t live = s.base_bytes, scratch = 0, largest = 0;
  size_t largest_unit = 0;
  for (size_t u = 0; u < s.units.size(); ++u) {
    const UnitMemory& m = s.units[u].memory;
    const int64_t buffers = spec::checked_add(spec::checked_mul(m.flat_numel, 16, what, "shard_degree"),
                                              spec::checked_mul(m.numel, 8, what, "dim"), what, "dim");
    scratch = std::max({scratch, m.forward_scratch, m.backward_scratch});
    if (m.activations > largest) largest = m.activations, largest_unit = u;
    live =
        spec::checked_add(live, spec::checked_add(buffers, m.activations, what, driver(u)), what, driver(largest_unit));
  }
  spec::checked_add(live, scratch, what, driver(largest_unit));
}

Program step_program(const StepSpec& spec) {
  check_live_bytes_fit(spec);
  return Builder(spec).build();
}

double compute_seconds(const Program& program, SpanKind kind) {
  double total = 0;
  for (const Segment& seg : program.segments) {
    for (size_t i = seg.begin; i < seg.end; ++i) {
      const Instruction& in = program.instructions[i];
      if (in.op == Op::kCompute && in.kind == kind) total += in.seconds * static_cast<double>(seg.repeat);
    }
  }
  return total;
}

}  // namespace fsdp::sharding
