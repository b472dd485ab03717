// estimate_plan in its three parts: the memory of one rank (model states plus the simulated timeline of
// the units' transient buffers), the price of every unit's compute and collectives in one micro-step,
// and the step time of the runtime's schedule simulated over those prices.
#include <algorithm>
#include <tuple>

#include "sharding/cost_model.h"
#include "sharding/planner.h"
#include "sharding/schedule_sim.h"
#include "spec/checked_size.h"
#include "spec/mxfp8_wire.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {
namespace {

// total + bytes x calls: a step's bytes of one collective, refused where grad_accum makes them overflow.
int64_t checked_bytes(int64_t total, int64_t bytes, int64_t calls) {
  const char* what = "a collective's bytes per step";
  return spec::checked_add(total, spec::checked_mul(bytes, calls, what, "grad_accum"), what, "grad_accum");
}

struct CommAccumulator {
  CommEstimate entry;
  void add(double buffer_bytes, double seconds, int64_t calls) {
    entry.calls += calls;
    entry.buffer_bytes = checked_bytes(entry.buffer_bytes, static_cast<int64_t>(buffer_bytes), calls);
    entry.bytes_sent_per_rank += ring_bytes_sent(buffer_bytes, entry.group_size) * static_cast<double>(calls) *
                                 (entry.collective == "all_reduce" ? 2.0 : 1.0);
    entry.seconds += seconds * static_cast<double>(calls);
  }
};

SimCollective collective(double seconds, spec::LinkLevel level, int stream, double bytes, double latency = 0) {
  return SimCollective{seconds, static_cast<int>(level), stream, static_cast<int64_t>(bytes),
                       std::min(latency, seconds)};
}

// A ring's (n - 1) steps each wait a link latency (twice over for an all-reduce).
double ring_latency(int64_t n, const Link& link, int passes = 1) {
  return n > 1 ? static_cast<double>(passes * (n - 1)) * link.latency_s : 0.0;
}

// Buddy redundancy prices something: a shard group of >= 2 ranks of plain FSDP (one rank has no buddy;
// HSDP's replicas already hold every shard and the runtime refuses the mirror there, as with experts).
bool prices_buddy(const spec::Mesh& mesh, const spec::Policy& policy) {
  if (policy.redundancy != spec::Redundancy::kBuddy) return false;
  if (mesh.replicate_degree() > 1 || mesh.expert_parallel_degree() > 1) {
    throw spec::SpecError("policy.redundancy = buddy needs plain FSDP (replicate 1, no expert parallelism); mesh is " +
                          std::to_string(mesh.replicate_degree()) + " x " + std::to_string(mesh.shard_degree()) +
                          ", expert parallel " + std::to_string(mesh.expert_parallel_degree()));
  }
  return mesh.shard_degree() > 1;
}

// What the memory part hands the others: each unit's buffers and what stays resident all step.
struct MemoryPart {
  std::vector<UnitMemory> per_unit;
  int64_t residual_stream = 0;  // bytes of the (B*T, dim) stream between units
  int64_t shard_numel = 0;      // elements of every unit's shard
};

MemoryPart estimate_memory(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units,
                           const ChipProfile& chip, const spec::Mesh& mesh, const spec::Policy& policy, double headroom,
                           PlanEstimate& est) {
  MemoryPart part;
  for (const auto& u : units) part.shard_numel += u.chunk_numel();
  auto& mem = est.memory;
  mem.param_shards = param_shard_bytes(model, units);
  if (policy.param_comm == spec::CommPrecision::kMxfp8) {  // each unit's quantised shard, kept between gathers
    for (const auto& u : units) mem.param_shards += spec::mxfp8_wire_bytes(u.chunk_numel());
  }
  mem.grad_shards = grad_shard_bytes(model, units);
  mem.optimizer_state = optimizer_state_bytes(part.shard_numel, policy.optimizer);
  part.per_unit = unit_memory(model, units, policy, chip.fp32_compute, mesh.expert_parallel_degree());
  for (size_t i = 0; i < units.size(); ++i) {  // runtime/window_pool.h: a pool where the group shares a server
    const bool experts = model.units[i].experts;
    const int64_t group = experts ? mesh.expert_shard_degree() : mesh.shard_degree();
    const spec::LinkLevel level = experts ? mesh.expert_shard_level() : mesh.shard_level();
    part.per_unit[i].gathers_in_windows = group > 1 && level == spec::LinkLevel::kIntra;
  }
  if (prices_buddy(mesh, policy)) {  // runtime/buddy_mirror.h: fp32 master and state of the buddy, its grads
    const char* what = "the buddy mirror's bytes";
    mem.redundancy_grads = spec::checked_mul(part.shard_numel, 4, what, "the model's size");
    mem.redundancy = spec::checked_add(mem.redundancy_grads, mem.optimizer_state, what, "the model's size");
  }
  // tokens (validate(policy) checked them) x dim x bytes, and the all-to-alls' tokens x k x dim x bytes
  // a step (6 a block, grad_accum times) checked before the pricing turns them into int64 buffer sizes.
  const int64_t tokens = policy.seq_len * policy.micro_batch;
  const char* driver = policy.seq_len >= policy.micro_batch ? "seq_len" : "micro_batch";
  const int64_t a = activation_element_bytes(policy.param_dtype, chip.fp32_compute);
  const auto row_bytes = [&](int64_t rows, const char* what) {
    return spec::checked_mul(spec::checked_mul(rows, model.dims.dim, what, driver), a, what, driver);
  };
  part.residual_stream = model.dims.known() ? row_bytes(tokens, "the residual stream") : 0;
  if (model.dims.moe.enabled()) {
    const char* what = "the all-to-alls' bytes per step";
    const int64_t rows = spec::checked_mul(tokens, model.dims.moe.top_k, what, driver);
    spec::checked_mul(spec::checked_mul(row_bytes(rows, what), 6, what, driver), policy.grad_accum, what, "grad_accum");
  }
  const MemoryTimeline tl = simulate_memory(part.per_unit, mem.model_states() + mem.redundancy + part.residual_stream,
                                            policy, mesh.shard_degree(), chip.fp32_compute, mem.redundancy_grads);
  mem.all_gather_buffers = tl.all_gather;
  mem.unsharded_params = tl.unsharded_params;
  mem.reduce_scatter_buffers = tl.reduce_scatter;
  mem.unsharded_grads = tl.unsharded_grads;
  mem.kept_params = tl.kept_params;
  mem.activations = part.residual_stream + tl.activations;
  mem.peak_bytes = tl.peak;
  est.capacity_bytes = static_cast<int64_t>(chip.memory_bytes);
  est.available_bytes = static_cast<int64_t>(chip.memory_bytes * (1.0 - headroom));
  est.fits = mem.peak() <= est.available_bytes;
  return part;
}

// The per-unit times of one micro-step: each unit's forward and backward on the chip's roofline, and
// its collectives on the links of the groups they run over; the totals per collective as they go.
class UnitPricing {
 public:
  UnitPricing(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units, const ChipProfile& chip,
              const spec::Mesh& mesh, const spec::Policy& policy)
      : model_(model),
        units_(units),
        chip_(chip),
        mesh_(mesh),
        policy_(policy),
        shard_(mesh.shard_degree()),
        replicate_(mesh.replicate_degree()),
        ep_(mesh.expert_parallel_degree()),
        accum_(policy.grad_accum),
        pb_(static_cast<int64_t>(element_size(policy.param_dtype))),
        rb_(static_cast<int64_t>(element_size(policy.reduce_dtype))),
        tokens_(static_cast<double>(policy.seq_len * policy.micro_batch)),
        peak_(chip.peak_flops(policy.param_dtype) * chip.matmul_efficiency),
        a_(activation_element_bytes(policy.param_dtype, chip.fp32_compute)),
        // Each group's link: its server's, or hierarchical over rails where it spans servers (group_link).
        intra_{chip.bandwidth(spec::LinkLevel::kIntra), chip.latency(spec::LinkLevel::kIntra)},
        inter_{chip.bandwidth(spec::LinkLevel::kInter), chip.latency(spec::LinkLevel::kInter)},
        shard_link_(group_link(shard_, mesh.nodes_spanned_by_block(shard_), intra_, inter_)),
        back_group_(policy.reshard.backward_group(shard_)),
        back_level_(back_group_ > 1 ? mesh.level_of_block(back_group_) : spec::LinkLevel::kIntra),
        back_link_(group_link(back_group_, mesh.nodes_spanned_by_block(back_group_), intra_, inter_)),
        rep_level_(mesh.replicate_level()),
        rep_link_(group_link(replicate_, mesh.nodes_spanned_by_replicate_group(), intra_, inter_)),
        // Expert units under expert parallelism: their FSDP group is the shard group's ranks equal mod ep;
        // reshard_after_forward = k keeps nothing for them (their groups have no subgroup of k), so
        // backward gathers over the whole expert group unless nothing is resharded.
        expert_shard_(mesh.expert_shard_degree()),
        expert_link_(
            group_link(expert_shard_,
                       mesh.expert_shard_level() == spec::LinkLevel::kInter ? mesh.nodes_spanned_by_block(shard_) : 1,
                       intra_, inter_)),
        expert_back_(policy.reshard.mode == spec::Reshard::Mode::kNever ? 1 : expert_shard_),
        // The tokens' all-to-all over the EP group of ep consecutive ranks, split by the link each round uses.
        a2a_bytes_(moe_all_to_all_bytes(model.dims, policy.seq_len * policy.micro_batch, a_)),
        a2a_(all_to_all_cost(a2a_bytes_, ep_, ep_ / mesh.nodes_spanned_by_block(ep_), intra_, inter_)),
        // Attention's products at the chip's attention-kernel rate: as matmul FLOPs they weigh
        // matmul_efficiency / attention_efficiency each (the extra weight below).
        attention_weight_(chip.matmul_efficiency / chip.attention_fraction() - 1) {}

  // Prices unit i into su; units are priced in order (a block's checkpointing mode carries to the expert
  // unit that follows it).
  void price(size_t i, SimUnit& su) {
    const spec::UnitSpec& spec = model_.units[i];
    if (spec.is_layer) layer_ac_ = spec::block_ac(policy_, layer_++);
    const spec::ActivationCheckpointing ac =
        spec.is_layer || spec.experts ? layer_ac_ : spec::ActivationCheckpointing::kNone;
    price_compute(i, ac, su);
    price_collectives(i, ac, su);
  }

  // The totals per collective, in the plan's order.
  void add_comm(std::vector<CommEstimate>& comm) const {
    for (const auto* c : {&ag_fwd_, &ag_bwd_, &rs_, &ar_, &eag_fwd_, &eag_bwd_, &ers_}) {
      if (c->entry.calls > 0) comm.push_back(c->entry);
    }
    for (const auto* c : {&a2a_intra_, &a2a_inter_}) {
      if (c->bytes_sent_per_rank > 0) comm.push_back(*c);
    }
  }

  double compute_seconds() const { return compute_s_; }
  double recompute_seconds() const { return recompute_s_; }
  double all_to_all_seconds() const { return t_all_to_all_; }
  const Link& intra() const { return intra_; }
  const Link& inter() const { return inter_; }
  double hbm() const { return chip_.hbm_bytes_per_s; }

 private:
  // Per block, by its own checkpointing mode (block_ac): bytes saved and bytes recomputed per token.
  double saved_per_token(spec::ActivationCheckpointing ac) const {
    return model_.dims.known() ? static_cast<double>(layer_saved_elements_per_token(model_.dims, ac) * a_) : 0.0;
  }
  double recomputed_per_token(spec::ActivationCheckpointing ac) const {
    return saved_per_token(spec::ActivationCheckpointing::kNone) - saved_per_token(ac);
  }

  void price_compute(size_t i, spec::ActivationCheckpointing ac, SimUnit& su) {
    const spec::UnitSpec& spec = model_.units[i];
    const spec::UnitShardLayout& u = units_[i];
    // Priced on the FLOPs the chip executes: the CPU reference's attention over the whole T x T matrix,
    // an accelerator's fused causal kernel over half; full checkpointing reruns the executed forward.
    const ExecutedFlops exec =
        unit_executed_flops_per_token(spec, model_.dims, policy_.seq_len, /*fused_causal=*/!chip_.fp32_compute);
    const bool reruns_forward = ac == spec::ActivationCheckpointing::kFull && (spec.is_layer || spec.experts);
    const double forward_flops = exec.forward + attention_weight_ * exec.attention_forward;
    const double backward_flops = exec.backward + attention_weight_ * exec.attention_backward;
    const double recompute =
        (reruns_forward ? forward_flops : unit_recompute_flops_per_token(spec, model_.dims, policy_.seq_len, ac)) *
        tokens_;
    const double param_bytes = static_cast<double>(u.numel() * pb_);
    const double act = spec.is_layer ? saved_per_token(ac) * tokens_ : 0.0;
    const double recompute_traffic = spec.is_layer ? 2 * recomputed_per_token(ac) * tokens_ : 0.0;
    // Forward reads the weights and writes the saved activations; backward reads the weights twice
    // (input and weight gradients), reads the activations, writes full gradients and redoes recomputation.
    // Non-matmul passes (norms, RoPE, SwiGLU, residuals, an unfused softmax) run on their own: their
    // bytes at memory bandwidth add to the matmuls' roofline.
    const ExecutedFlops passes = unit_elementwise_bytes_per_token(
        spec, model_.dims, policy_.seq_len, a_, /*fused_causal=*/!chip_.fp32_compute, i + 1 == units_.size());
    su.forward = roofline_seconds(forward_flops * tokens_, peak_, param_bytes + act, chip_.hbm_bytes_per_s) +
                 passes.forward * tokens_ / chip_.hbm_bytes_per_s;
    su.backward = roofline_seconds(backward_flops * tokens_ + recompute, peak_,
                                   3 * param_bytes + act + recompute_traffic, chip_.hbm_bytes_per_s) +
                  passes.backward * tokens_ / chip_.hbm_bytes_per_s;
    compute_s_ += (su.forward + su.backward) * static_cast<double>(accum_);
    recompute_s_ +=
        roofline_seconds(recompute, peak_, recompute_traffic, chip_.hbm_bytes_per_s) * static_cast<double>(accum_);
  }

  void price_collectives(size_t i, spec::ActivationCheckpointing ac, SimUnit& su) {
    const spec::UnitSpec& spec = model_.units[i];
    const spec::UnitShardLayout& u = units_[i];
    const int64_t group = spec.experts ? expert_shard_ : shard_;
    const int64_t bgroup = spec.experts ? expert_back_ : back_group_;
    const Link& glink = spec.experts ? expert_link_ : shard_link_;
    const Link& blink = spec.experts ? expert_link_ : back_link_;
    // On the wire: MXFP8 moves 8.25 bits per element (33/32 bytes: 8.25/16 of bf16).
    const double gather_bytes =
        static_cast<double>(u.flat_numel()) * spec::wire_element_bytes(policy_.param_comm, policy_.param_dtype);
    const double reduce_bytes =
        static_cast<double>(u.flat_numel()) * spec::wire_element_bytes(policy_.grad_comm, policy_.reduce_dtype);
    // Expert units gather and reduce on communicators of their own (streams kStreamExpert + ...).
    const int streams = spec.experts ? kStreamExpert : 0;
    const spec::LinkLevel glevel = spec.experts ? mesh_.expert_shard_level() : mesh_.shard_level();
    su.all_gather = collective(all_gather_seconds(gather_bytes, group, glink), glevel, streams + kStreamGather,
                               gather_bytes, ring_latency(group, glink));
    su.all_gather_backward =
        collective(all_gather_seconds(gather_bytes, bgroup, blink), spec.experts ? glevel : back_level_,
                   streams + kStreamGatherGroup, gather_bytes, ring_latency(bgroup, blink));
    su.reduce_scatter = collective(reduce_scatter_seconds(reduce_bytes, group, glink), glevel, streams + kStreamReduce,
                                   reduce_bytes, ring_latency(group, glink));
    price_mxfp8_codec(u, group, su);
    // An MXFP8 reduce-scatter hands over f32 sums, which the HSDP all-reduce then carries.
    const double ar_bytes =
        static_cast<double>(u.chunk_numel() * (policy_.grad_comm == spec::CommPrecision::kMxfp8 ? 4 : rb_));
    su.all_reduce = collective(all_reduce_seconds(ar_bytes, replicate_, rep_link_), rep_level_, kStreamGather, ar_bytes,
                               ring_latency(replicate_, rep_link_, 2));
    if (group > 1) {
      (spec.experts ? eag_fwd_ : ag_fwd_).add(gather_bytes, su.all_gather.seconds, accum_);
      (spec.experts ? ers_ : rs_).add(reduce_bytes, su.reduce_scatter.seconds, accum_);
    }
    if (bgroup > 1) (spec.experts ? eag_bwd_ : ag_bwd_).add(gather_bytes, su.all_gather_backward.seconds, accum_);
    if (replicate_ > 1) ar_.add(ar_bytes, su.all_reduce.seconds, accum_);
    if (spec.experts && ep_ > 1) price_all_to_all(ac, su);
  }

  // MXFP8's codec on the training thread (runtime/fsdp_unit.cc): the owner quantises its f32 shard once
  // per optimizer step; every gather over the shard group decodes the whole buffer in the copy-out (and,
  // with a reshard group, the kept slice again); a reduce-scatter quantises the chunks it sends and
  // decodes and adds the ones it receives.
  void price_mxfp8_codec(const spec::UnitShardLayout& u, int64_t group, SimUnit& su) const {
    const double quantize = chip_.mxfp8_quantize_seconds_per_element();
    const double decode = chip_.mxfp8_decode_seconds_per_element();
    const auto others = static_cast<double>((group - 1) * u.chunk_numel());
    if (policy_.param_comm == spec::CommPrecision::kMxfp8) {
      su.gather_quantize = static_cast<double>(u.chunk_numel()) * quantize;
      su.gather_decode = static_cast<double>(u.numel()) * decode;
      if (policy_.reshard.mode == spec::Reshard::Mode::kGroup && policy_.reshard.group > 0) {  // if one is kept
        su.kept_decode = static_cast<double>(u.flat_numel() / policy_.reshard.group) * decode;
      }
    }
    if (policy_.grad_comm == spec::CommPrecision::kMxfp8) {
      su.reduce_quantize = others * quantize;
      su.reduce_decode = others * decode;
    }
  }

  // An expert unit's token exchanges: pairwise rounds, one after another, priced on the slower link
  // they use.
  void price_all_to_all(spec::ActivationCheckpointing ac, SimUnit& su) {
    const int64_t calls = moe_all_to_alls(ac);
    const spec::LinkLevel a2a_level = a2a_.inter_seconds > 0 ? spec::LinkLevel::kInter : spec::LinkLevel::kIntra;
    su.all_to_all_forward = collective(2 * a2a_.seconds(), a2a_level, kStreamGather, 2 * a2a_bytes_);
    su.all_to_all_backward = collective(static_cast<double>(calls - 2) * a2a_.seconds(), a2a_level, kStreamGather,
                                        static_cast<double>(calls - 2) * a2a_bytes_);
    t_all_to_all_ += (su.all_to_all_forward.seconds + su.all_to_all_backward.seconds) * static_cast<double>(accum_);
    for (auto [c, bytes, secs] : {std::tuple{&a2a_intra_, a2a_.intra_bytes, a2a_.intra_seconds},
                                  std::tuple{&a2a_inter_, a2a_.inter_bytes, a2a_.inter_seconds}}) {
      c->calls += calls * accum_;
      c->buffer_bytes = checked_bytes(c->buffer_bytes, static_cast<int64_t>(a2a_bytes_), calls * accum_);
      c->bytes_sent_per_rank += bytes * static_cast<double>(calls * accum_);
      c->seconds += secs * static_cast<double>(calls * accum_);
    }
  }

  const spec::ModelSpec& model_;
  const std::vector<spec::UnitShardLayout>& units_;
  const ChipProfile& chip_;
  const spec::Mesh& mesh_;
  const spec::Policy& policy_;
  const int64_t shard_, replicate_, ep_, accum_, pb_, rb_;
  const double tokens_, peak_;
  const int64_t a_;
  const Link intra_, inter_, shard_link_;
  const int64_t back_group_;
  const spec::LinkLevel back_level_;
  const Link back_link_;
  const spec::LinkLevel rep_level_;
  const Link rep_link_;
  const int64_t expert_shard_;
  const Link expert_link_;
  const int64_t expert_back_;
  const double a2a_bytes_;
  const AllToAllCost a2a_;
  const double attention_weight_;

  CommAccumulator ag_fwd_{{"all_gather_forward", mesh_.shard_level(), shard_}};
  CommAccumulator ag_bwd_{{"all_gather_backward", back_level_, back_group_}};
  CommAccumulator rs_{{"reduce_scatter", mesh_.shard_level(), shard_}};
  CommAccumulator ar_{{"all_reduce", rep_level_, replicate_}};
  CommAccumulator eag_fwd_{{"expert_all_gather_fwd", mesh_.expert_shard_level(), expert_shard_}};
  CommAccumulator eag_bwd_{{"expert_all_gather_bwd", mesh_.expert_shard_level(), expert_back_}};
  CommAccumulator ers_{{"expert_reduce_scatter", mesh_.expert_shard_level(), expert_shard_}};
  CommEstimate a2a_intra_{"all_to_all", spec::LinkLevel::kIntra, ep_, 0, 0, 0, 0};
  CommEstimate a2a_inter_{"all_to_all", spec::LinkLevel::kInter, ep_, 0, 0, 0, 0};
  spec::ActivationCheckpointing layer_ac_ = spec::ActivationCheckpointing::kNone;  // the block an expert unit follows
  int64_t layer_ = 0;
  double compute_s_ = 0, recompute_s_ = 0, t_all_to_all_ = 0;
};

// Buddy redundancy's step: every rank sends its fp32 grad shard to its mirror holder and receives its
// buddy's (a neighbour in the shard group: over the shard group's slowest link), then updates the mirror
// with the owner's optimizer traffic on fp32 masters. Adds the row "buddy_grads" to the communication.
void price_buddy(const spec::Mesh& mesh, const UnitPricing& pricing, StepSpec& step, PlanEstimate& est) {
  const auto& mem = est.memory;
  if (mem.redundancy_grads == 0) return;
  const Link& link = mesh.shard_level() == spec::LinkLevel::kInter ? pricing.inter() : pricing.intra();
  const auto bytes = static_cast<double>(mem.redundancy_grads);
  const double seconds = bytes / link.bytes_per_s + link.latency_s;
  step.buddy_grad_bytes = mem.redundancy_grads;
  step.buddy_exchange = collective(seconds, mesh.shard_level(), kStreamReduce, bytes, link.latency_s);
  step.mirror_update = static_cast<double>(3 * mem.redundancy_grads + 2 * mem.optimizer_state) / pricing.hbm();
  est.comm.push_back(
      CommEstimate{"buddy_grads", mesh.shard_level(), mesh.shard_degree(), 1, mem.redundancy_grads, bytes, seconds});
}

// The step time: the runtime's schedule over the priced units, simulated, and the rates it gives.
void estimate_step_time(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units,
                        const ChipProfile& chip, const spec::Mesh& mesh, const spec::Policy& policy,
                        const MemoryPart& memory, const UnitPricing& pricing, StepSpec& step, PlanEstimate& est) {
  auto& t = est.time;
  const auto& mem = est.memory;
  const double opt_traffic = static_cast<double>(mem.param_shards * 2 + mem.grad_shards + 2 * mem.optimizer_state);
  t.optimizer = opt_traffic / chip.hbm_bytes_per_s;
  for (size_t i = 0; i < units.size(); ++i) {  // each unit's share of the update: its shard's
    step.units[i].optimizer = t.optimizer * static_cast<double>(units[i].chunk_numel()) /
                              static_cast<double>(std::max<int64_t>(1, memory.shard_numel));
  }
  // The loss and the gradient norm: one 8-byte all-reduce each over the world (and the shard group).
  const spec::LinkLevel world_level = mesh.nodes() > 1 ? spec::LinkLevel::kInter : spec::LinkLevel::kIntra;
  const Link world_link = group_link(mesh.world_size(), mesh.nodes(), pricing.intra(), pricing.inter());
  step.step_sync = collective(all_reduce_seconds(8, mesh.world_size(), world_link), world_level, kStreamGather, 8,
                              ring_latency(mesh.world_size(), world_link, 2));
  price_buddy(mesh, pricing, step, est);
  const Program program = step_program(step);
  const StepSimulation sim = simulate(program, SimOptions{chip.comm_compute_contention, false});
  t.mxfp8_codec = compute_seconds(program, SpanKind::kMxfp8Codec);
  t.redundancy = step.buddy_exchange.seconds + step.mirror_update;
  t.compute = pricing.compute_seconds();
  t.all_to_all = pricing.all_to_all_seconds();
  t.recompute = pricing.recompute_seconds();
  for (const auto& c : est.comm) t.communication += c.seconds;
  t.step = sim.step;
  t.exposed_communication = sim.exposed_communication;
  const double tokens = static_cast<double>(policy.seq_len * policy.micro_batch);
  t.model_flops_per_rank =
      model_flops_per_token(model, policy.seq_len) * tokens * static_cast<double>(policy.grad_accum);
  t.mfu = t.model_flops_per_rank / (t.step * chip.peak_flops(policy.param_dtype));
  t.tokens_per_s = tokens * (static_cast<double>(policy.grad_accum) * static_cast<double>(mesh.world_size())) / t.step;
}

}  // namespace

PlanEstimate estimate_plan(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units,
                           const ChipProfile& chip, const spec::Mesh& mesh, const spec::Policy& policy, double headroom,
                           StepSpec* schedule) {
  validate(policy, mesh.shard_degree());
  if (units.size() != model.units.size() || units.empty() || units[0].shard_degree() != mesh.shard_degree()) {
    throw spec::SpecError("estimate_plan: layout does not match the model and the mesh's shard degree");
  }
  PlanEstimate est;
  const MemoryPart memory = estimate_memory(model, units, chip, mesh, policy, headroom, est);

  StepSpec step{.policy = policy,
                .shard_degree = mesh.shard_degree(),
                .fp32_compute = chip.fp32_compute,
                .base_bytes = est.memory.model_states() + est.memory.redundancy + memory.residual_stream};
  step.units.resize(units.size());
  UnitPricing pricing(model, units, chip, mesh, policy);
  for (size_t i = 0; i < units.size(); ++i) {
    step.units[i].memory = memory.per_unit[i];
    pricing.price(i, step.units[i]);
  }
  pricing.add_comm(est.comm);

  estimate_step_time(model, units, chip, mesh, policy, memory, pricing, step, est);
  if (schedule != nullptr) *schedule = std::move(step);
  return est;
}

}  // namespace fsdp::sharding
