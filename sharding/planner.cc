#include "sharding/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "sharding/cost_model.h"
#include "sharding/schedule_sim.h"
#include "spec/expert_parallel.h"
#include "spec/mxfp8_wire.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct CommAccumulator {
  CommEstimate entry;
  void add(double buffer_bytes, double seconds, int64_t calls) {
    entry.calls += calls;
    entry.buffer_bytes += static_cast<int64_t>(buffer_bytes) * calls;
    entry.bytes_sent_per_rank += ring_bytes_sent(buffer_bytes, entry.group_size) * static_cast<double>(calls) *
                                 (entry.collective == "all_reduce" ? 2.0 : 1.0);
    entry.seconds += seconds * static_cast<double>(calls);
  }
};

}  // namespace

int64_t grad_accum_for(int64_t global_batch, int64_t world_size, int64_t micro_batch) {
  if (global_batch <= 0) throw spec::SpecError("global batch must be >= 1 (got " + std::to_string(global_batch) + ")");
  if (micro_batch <= 0) throw spec::SpecError("micro-batch must be >= 1 (got " + std::to_string(micro_batch) + ")");
  const int64_t per_step = world_size * micro_batch;
  if (global_batch % per_step != 0) {
    throw spec::SpecError("global batch " + std::to_string(global_batch) + " is not a multiple of world size " +
                          std::to_string(world_size) + " x micro-batch " + std::to_string(micro_batch) + " = " +
                          std::to_string(per_step));
  }
  return global_batch / per_step;
}

spec::ModelSpec rank_units(const spec::ModelSpec& model, const spec::Mesh& mesh) {
  return spec::expert_parallel_units(model, mesh.expert_parallel_degree(), 0, mesh.shard_degree());
}

std::vector<spec::UnitShardLayout> shard_rank_units(const spec::ModelSpec& rank_units, const spec::Mesh& mesh) {
  return spec::shard_expert_parallel_units(rank_units, mesh.shard_degree(), mesh.expert_parallel_degree());
}

PlanEstimate estimate_plan(const spec::ModelSpec& model, const std::vector<spec::UnitShardLayout>& units,
                           const ChipProfile& chip, const spec::Mesh& mesh, const spec::Policy& policy, double headroom,
                           StepSpec* schedule) {
  validate(policy, mesh.shard_degree());
  if (units.size() != model.units.size() || units.empty() || units[0].shard_degree() != mesh.shard_degree()) {
    throw spec::SpecError("estimate_plan: layout does not match the model and the mesh's shard degree");
  }
  PlanEstimate est;
  const int64_t shard = mesh.shard_degree();
  const int64_t replicate = mesh.replicate_degree();
  const int64_t pb = static_cast<int64_t>(element_size(policy.param_dtype));
  const int64_t rb = static_cast<int64_t>(element_size(policy.reduce_dtype));

  // ---- Memory ----
  int64_t shard_numel = 0;
  for (const auto& u : units) shard_numel += u.chunk_numel();
  auto& mem = est.memory;
  mem.param_shards = param_shard_bytes(model, units);
  if (policy.param_comm == spec::CommPrecision::kMxfp8) {  // each unit's quantised shard, kept between gathers
    for (const auto& u : units) mem.param_shards += spec::mxfp8_wire_bytes(u.chunk_numel());
  }
  mem.grad_shards = grad_shard_bytes(model, units);
  mem.optimizer_state = optimizer_state_bytes(shard_numel, policy.optimizer);
  const int64_t ep = mesh.expert_parallel_degree();
  const auto per_unit = unit_memory(model, units, policy, chip.fp32_compute, ep);
  const int64_t residual_stream =
      model.dims.known() ? policy.seq_len * policy.micro_batch * model.dims.dim *
                               activation_element_bytes(policy.param_dtype, chip.fp32_compute)
                         : 0;
  const MemoryTimeline tl =
      simulate_memory(per_unit, mem.model_states() + residual_stream, policy, shard, chip.fp32_compute);
  mem.all_gather_buffers = tl.all_gather;
  mem.unsharded_params = tl.unsharded_params;
  mem.reduce_scatter_buffers = tl.reduce_scatter;
  mem.unsharded_grads = tl.unsharded_grads;
  mem.kept_params = tl.kept_params;
  mem.activations = residual_stream + tl.activations;
  mem.peak_bytes = tl.peak;
  est.capacity_bytes = static_cast<int64_t>(chip.memory_bytes);
  est.available_bytes = static_cast<int64_t>(chip.memory_bytes * (1.0 - headroom));
  est.fits = mem.peak() <= est.available_bytes;

  // ---- Per-unit times of one micro-step ----
  const double tokens = static_cast<double>(policy.seq_len * policy.micro_batch);
  const double peak = chip.peak_flops(policy.param_dtype) * chip.matmul_efficiency;
  const int64_t a = activation_element_bytes(policy.param_dtype, chip.fp32_compute);
  // Per block, by its own checkpointing mode (block_ac): bytes saved and bytes recomputed per token.
  auto saved_per_token = [&](spec::ActivationCheckpointing ac) {
    return model.dims.known() ? static_cast<double>(layer_saved_elements_per_token(model.dims, ac) * a) : 0.0;
  };
  auto recomputed_per_token = [&](spec::ActivationCheckpointing ac) {
    return saved_per_token(spec::ActivationCheckpointing::kNone) - saved_per_token(ac);
  };
  // Each group's link: its server's, or hierarchical over rails where it spans servers (group_link).
  const Link intra{chip.bandwidth(spec::LinkLevel::kIntra), chip.latency(spec::LinkLevel::kIntra)};
  const Link inter{chip.bandwidth(spec::LinkLevel::kInter), chip.latency(spec::LinkLevel::kInter)};
  const Link shard_link = group_link(shard, mesh.nodes_spanned_by_block(shard), intra, inter);
  const int64_t back_group = policy.reshard.backward_group(shard);
  const spec::LinkLevel back_level = back_group > 1 ? mesh.level_of_block(back_group) : spec::LinkLevel::kIntra;
  const Link back_link = group_link(back_group, mesh.nodes_spanned_by_block(back_group), intra, inter);
  const spec::LinkLevel rep_level = mesh.replicate_level();
  const Link rep_link = group_link(replicate, mesh.nodes_spanned_by_replicate_group(), intra, inter);

  CommAccumulator ag_fwd{{"all_gather_forward", mesh.shard_level(), shard}};
  CommAccumulator ag_bwd{{"all_gather_backward", back_level, back_group}};
  CommAccumulator rs{{"reduce_scatter", mesh.shard_level(), shard}};
  CommAccumulator ar{{"all_reduce", rep_level, replicate}};
  const int64_t accum = policy.grad_accum;

  // Expert units under expert parallelism: their FSDP group is the shard group's ranks equal mod ep;
  // reshard_after_forward = k keeps nothing for them (their groups have no subgroup of k), so backward
  // gathers over the whole expert group unless nothing is resharded.
  const int64_t expert_shard = mesh.expert_shard_degree();
  const Link expert_link = group_link(
      expert_shard, mesh.expert_shard_level() == spec::LinkLevel::kInter ? mesh.nodes_spanned_by_block(shard) : 1,
      intra, inter);
  const int64_t expert_back = policy.reshard.mode == spec::Reshard::Mode::kNever ? 1 : expert_shard;
  CommAccumulator eag_fwd{{"expert_all_gather_fwd", mesh.expert_shard_level(), expert_shard}};
  CommAccumulator eag_bwd{{"expert_all_gather_bwd", mesh.expert_shard_level(), expert_back}};
  CommAccumulator ers{{"expert_reduce_scatter", mesh.expert_shard_level(), expert_shard}};
  // The tokens' all-to-all over the EP group of ep consecutive ranks, split by the link each round uses.
  const int64_t ep_local = ep / mesh.nodes_spanned_by_block(ep);
  const double a2a_bytes = moe_all_to_all_bytes(model.dims, policy.seq_len * policy.micro_batch,
                                                activation_element_bytes(policy.param_dtype, chip.fp32_compute));
  const AllToAllCost a2a =
      all_to_all_cost(a2a_bytes, ep, ep_local, intra, inter);
  CommEstimate a2a_intra{"all_to_all", spec::LinkLevel::kIntra, ep, 0, 0, 0, 0};
  CommEstimate a2a_inter{"all_to_all", spec::LinkLevel::kInter, ep, 0, 0, 0, 0};
  spec::ActivationCheckpointing layer_ac = spec::ActivationCheckpointing::kNone;  // of the block an expert unit follows
  double t_all_to_all = 0;

  StepSpec step{.policy = policy,
                .shard_degree = shard,
                .fp32_compute = chip.fp32_compute,
                .base_bytes = mem.model_states() + residual_stream};
  step.units.resize(units.size());
  auto collective = [](double seconds, spec::LinkLevel level, int stream, double bytes, double latency = 0) {
    return SimCollective{seconds, static_cast<int>(level), stream, static_cast<int64_t>(bytes),
                         std::min(latency, seconds)};
  };
  // A ring's (n - 1) steps each wait a link latency (twice over for an all-reduce).
  auto ring_latency = [](int64_t n, const Link& link, int passes = 1) {
    return n > 1 ? static_cast<double>(passes * (n - 1)) * link.latency_s : 0.0;
  };
  // Attention's products at the chip's attention-kernel rate: as matmul FLOPs they weigh
  // matmul_efficiency / attention_efficiency each (the extra weight below).
  const double attention_weight = chip.matmul_efficiency / chip.attention_fraction() - 1;
  double compute_s = 0;
  double recompute_s = 0;
  int64_t layer = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    const spec::UnitSpec& spec = model.units[i];
    const spec::UnitShardLayout& u = units[i];
    if (spec.is_layer) layer_ac = spec::block_ac(policy, layer++);
    const spec::ActivationCheckpointing ac =
        spec.is_layer || spec.experts ? layer_ac : spec::ActivationCheckpointing::kNone;
    // Priced on the FLOPs the chip executes: the CPU reference's attention over the whole T x T matrix,
    // an accelerator's fused causal kernel over half; full checkpointing reruns the executed forward.
    const ExecutedFlops exec =
        unit_executed_flops_per_token(spec, model.dims, policy.seq_len, /*fused_causal=*/!chip.fp32_compute);
    const bool reruns_forward = ac == spec::ActivationCheckpointing::kFull && (spec.is_layer || spec.experts);
    const double forward_flops = exec.forward + attention_weight * exec.attention_forward;
    const double backward_flops = exec.backward + attention_weight * exec.attention_backward;
    const double recompute =
        (reruns_forward ? forward_flops : unit_recompute_flops_per_token(spec, model.dims, policy.seq_len, ac)) * tokens;
    const double param_bytes = static_cast<double>(u.numel() * pb);
    const double act = spec.is_layer ? saved_per_token(ac) * tokens : 0.0;
    const int64_t group = spec.experts ? expert_shard : shard;
    const int64_t bgroup = spec.experts ? expert_back : back_group;
    const Link& glink = spec.experts ? expert_link : shard_link;
    const Link& blink = spec.experts ? expert_link : back_link;
    const double recompute_traffic = spec.is_layer ? 2 * recomputed_per_token(ac) * tokens : 0.0;
    // Forward reads the weights and writes the saved activations; backward reads the weights twice
    // (input and weight gradients), reads the activations, writes full gradients and redoes recomputation.
    SimUnit& su = step.units[i];
    su.memory = per_unit[i];
    // Non-matmul passes (norms, RoPE, SwiGLU, residuals, an unfused softmax) run on their own: their
    // bytes at memory bandwidth add to the matmuls' roofline.
    const ExecutedFlops passes = unit_elementwise_bytes_per_token(
        spec, model.dims, policy.seq_len, a, /*fused_causal=*/!chip.fp32_compute, i + 1 == units.size());
    su.forward = roofline_seconds(forward_flops * tokens, peak, param_bytes + act, chip.hbm_bytes_per_s) +
                 passes.forward * tokens / chip.hbm_bytes_per_s;
    su.backward = roofline_seconds(backward_flops * tokens + recompute, peak,
                                   3 * param_bytes + act + recompute_traffic, chip.hbm_bytes_per_s) +
                  passes.backward * tokens / chip.hbm_bytes_per_s;
    compute_s += (su.forward + su.backward) * static_cast<double>(accum);
    recompute_s +=
        roofline_seconds(recompute, peak, recompute_traffic, chip.hbm_bytes_per_s) * static_cast<double>(accum);

    // On the wire: MXFP8 moves 8.25 bits per element (33/32 bytes: 8.25/16 of bf16).
    const double gather_bytes =
        static_cast<double>(u.flat_numel()) * spec::wire_element_bytes(policy.param_comm, policy.param_dtype);
    const double reduce_bytes =
        static_cast<double>(u.flat_numel()) * spec::wire_element_bytes(policy.grad_comm, policy.reduce_dtype);
    // Expert units gather and reduce on communicators of their own (streams kStreamExpert + ...).
    const int streams = spec.experts ? kStreamExpert : 0;
    const spec::LinkLevel glevel = spec.experts ? mesh.expert_shard_level() : mesh.shard_level();
    su.all_gather = collective(all_gather_seconds(gather_bytes, group, glink), glevel, streams + kStreamGather,
                               gather_bytes, ring_latency(group, glink));
    su.all_gather_backward =
        collective(all_gather_seconds(gather_bytes, bgroup, blink), spec.experts ? glevel : back_level,
                   streams + kStreamGatherGroup, gather_bytes, ring_latency(bgroup, blink));
    su.reduce_scatter = collective(reduce_scatter_seconds(reduce_bytes, group, glink), glevel,
                                   streams + kStreamReduce, reduce_bytes, ring_latency(group, glink));
    // MXFP8's codec on the training thread (runtime/fsdp_unit.cc): the owner quantises its f32 shard once
    // per optimizer step; every gather over the shard group decodes the whole buffer in the copy-out (and,
    // with a reshard group, the kept slice again); a reduce-scatter quantises the chunks it sends and
    // decodes and adds the ones it receives.
    const double quantize = chip.mxfp8_quantize_seconds_per_element();
    const double decode = chip.mxfp8_decode_seconds_per_element();
    const auto others = static_cast<double>((group - 1) * u.chunk_numel());
    if (policy.param_comm == spec::CommPrecision::kMxfp8) {
      su.gather_quantize = static_cast<double>(u.chunk_numel()) * quantize;
      su.gather_decode = static_cast<double>(u.numel()) * decode;
      if (policy.reshard.mode == spec::Reshard::Mode::kGroup && policy.reshard.group > 0) {  // used only if one is kept
        su.kept_decode = static_cast<double>(u.flat_numel() / policy.reshard.group) * decode;
      }
    }
    if (policy.grad_comm == spec::CommPrecision::kMxfp8) {
      su.reduce_quantize = others * quantize;
      su.reduce_decode = others * decode;
    }
    // An MXFP8 reduce-scatter hands over f32 sums, which the HSDP all-reduce then carries.
    const double ar_bytes =
        static_cast<double>(u.chunk_numel() * (policy.grad_comm == spec::CommPrecision::kMxfp8 ? 4 : rb));
    su.all_reduce = collective(all_reduce_seconds(ar_bytes, replicate, rep_link), rep_level, kStreamGather, ar_bytes,
                               ring_latency(replicate, rep_link, 2));
    if (group > 1) {
      (spec.experts ? eag_fwd : ag_fwd).add(gather_bytes, su.all_gather.seconds, accum);
      (spec.experts ? ers : rs).add(reduce_bytes, su.reduce_scatter.seconds, accum);
    }
    if (bgroup > 1) (spec.experts ? eag_bwd : ag_bwd).add(gather_bytes, su.all_gather_backward.seconds, accum);
    if (replicate > 1) ar.add(ar_bytes, su.all_reduce.seconds, accum);
    if (spec.experts && ep > 1) {
      const int64_t calls = moe_all_to_alls(ac);
      // Pairwise rounds, one after another: priced on the slower link they use.
      const spec::LinkLevel a2a_level = a2a.inter_seconds > 0 ? spec::LinkLevel::kInter : spec::LinkLevel::kIntra;
      su.all_to_all_forward = collective(2 * a2a.seconds(), a2a_level, kStreamGather, 2 * a2a_bytes);
      su.all_to_all_backward = collective(static_cast<double>(calls - 2) * a2a.seconds(), a2a_level, kStreamGather,
                                          static_cast<double>(calls - 2) * a2a_bytes);
      t_all_to_all += (su.all_to_all_forward.seconds + su.all_to_all_backward.seconds) * static_cast<double>(accum);
      for (auto [c, bytes, secs] : {std::tuple{&a2a_intra, a2a.intra_bytes, a2a.intra_seconds},
                                    std::tuple{&a2a_inter, a2a.inter_bytes, a2a.inter_seconds}}) {
        c->calls += calls * accum;
        c->buffer_bytes += static_cast<int64_t>(a2a_bytes) * calls * accum;
        c->bytes_sent_per_rank += bytes * static_cast<double>(calls * accum);
        c->seconds += secs * static_cast<double>(calls * accum);
      }
    }
  }
  for (auto* c : {&ag_fwd, &ag_bwd, &rs, &ar, &eag_fwd, &eag_bwd, &ers}) {
    if (c->entry.calls > 0) est.comm.push_back(c->entry);
  }
  for (const auto* c : {&a2a_intra, &a2a_inter}) {
    if (c->bytes_sent_per_rank > 0) est.comm.push_back(*c);
  }

  // ---- Step time: the runtime's schedule, simulated ----
  auto& t = est.time;
  const double opt_traffic = static_cast<double>(mem.param_shards * 2 + mem.grad_shards + 2 * mem.optimizer_state);
  t.optimizer = opt_traffic / chip.hbm_bytes_per_s;
  for (size_t i = 0; i < units.size(); ++i) {  // each unit's share of the update: its shard's
    step.units[i].optimizer = t.optimizer * static_cast<double>(units[i].chunk_numel()) /
                              static_cast<double>(std::max<int64_t>(1, shard_numel));
  }
  // The loss and the gradient norm: one 8-byte all-reduce each over the world (and the shard group).
  const spec::LinkLevel world_level = mesh.nodes() > 1 ? spec::LinkLevel::kInter : spec::LinkLevel::kIntra;
  const Link world_link = group_link(mesh.world_size(), mesh.nodes(), intra, inter);
  step.step_sync = collective(all_reduce_seconds(8, mesh.world_size(), world_link), world_level, kStreamGather, 8,
                              ring_latency(mesh.world_size(), world_link, 2));
  const Program program = step_program(step);
  const StepSimulation sim = simulate(program, SimOptions{chip.comm_compute_contention, false});
  t.mxfp8_codec = compute_seconds(program, SpanKind::kMxfp8Codec);
  t.compute = compute_s;
  t.all_to_all = t_all_to_all;
  t.recompute = recompute_s;
  for (const auto& c : est.comm) t.communication += c.seconds;
  t.step = sim.step;
  t.exposed_communication = sim.exposed_communication;
  if (schedule != nullptr) *schedule = std::move(step);
  t.model_flops_per_rank = model_flops_per_token(model, policy.seq_len) * tokens * static_cast<double>(accum);
  t.mfu = t.model_flops_per_rank / (t.step * chip.peak_flops(policy.param_dtype));
  t.tokens_per_s = tokens * static_cast<double>(accum * mesh.world_size()) / t.step;
  return est;
}

Plan make_plan(const spec::ModelSpec& model, const ChipProfile& chip, const spec::Mesh& mesh,
               const spec::Policy& policy, double headroom) {
  validate(model);
  validate(chip);
  validate(policy, mesh.shard_degree());
  if (!(headroom >= 0 && headroom < 1)) {
    throw spec::SpecError("headroom must be in [0, 1) (got " + std::to_string(headroom) + ")");
  }
  spec::ModelSpec units = rank_units(model, mesh);
  auto layouts = shard_rank_units(units, mesh);
  Plan plan{model, mesh, chip, policy, headroom, std::move(layouts), {}, {}, std::move(units), {}};
  plan.estimate = estimate_plan(plan.rank_model, plan.units, chip, mesh, policy, headroom, &plan.schedule);

  auto& notes = plan.notes;
  std::ostringstream s;
  if (!model.dims.known()) {
    notes.push_back("model spec gives no transformer dims: activations not estimated, FLOPs from parameters only");
  }
  int64_t padding = 0;
  int64_t flat = 0;
  for (const auto& u : plan.units) {
    padding += u.padding_numel();
    flat += u.flat_numel();
  }
  if (padding > 0) {
    s.str("");
    s.precision(3);
    s << "padding to the shard degree adds " << padding << " elements ("
      << 100.0 * static_cast<double>(padding) / static_cast<double>(flat) << "% of the flat buffers)";
    notes.push_back(s.str());
  }
  if (mesh.shard_level() == spec::LinkLevel::kInter) {
    notes.push_back("shard group spans " + std::to_string(mesh.nodes_spanned_by_block(mesh.shard_degree())) +
                    " servers: all-gathers and reduce-scatters are bound by the inter-server network");
  }
  if (const int64_t ep = mesh.expert_parallel_degree(); ep > 1) {
    s.str("");
    s << "expert parallelism " << ep << ": each rank holds " << model.dims.moe.num_experts / ep << " of "
      << model.dims.moe.num_experts << " experts per block, sharded over " << mesh.expert_shard_degree()
      << " ranks; tokens exchanged by all-to-all over " << ep << " ranks (" << name(mesh.expert_parallel_level())
      << "-server), blocking, assuming balanced routing";
    notes.push_back(s.str());
  }
  if (mesh.replicate_degree() > 1) {
    notes.push_back("HSDP: gradients all-reduced over " + std::to_string(mesh.replicate_degree()) + " replicas (" +
                    std::string(name(mesh.replicate_level())) + "-server links)");
  }
  const auto& e = plan.estimate;
  if (!e.fits) {
    s.str("");
    s.precision(4);
    s << "does not fit: peak " << static_cast<double>(e.memory.peak()) / kGiB << " GiB > "
      << static_cast<double>(e.available_bytes) / kGiB << " GiB available (" << chip.memory_bytes / kGiB << " GiB less "
      << headroom * 100 << "% headroom)";
    notes.push_back(s.str());
  }
  return plan;
}

}  // namespace fsdp::sharding
