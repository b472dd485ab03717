#include "sharding/plan_io.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "spec/spec_error.h"

namespace fsdp::sharding {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string gib(int64_t bytes) { return fmt("%.3f", static_cast<double>(bytes) / kGiB); }

std::string pad(const std::string& s, size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

// Only where buddy redundancy is priced: other plans' outputs stay as they were.
void set_redundancy(const spec::Policy& p, const PlanEstimate& e, fsdp::proto::RedundancyInfo& red) {
  red.set_mode(std::string(name(p.redundancy)));
  red.set_mirror_bytes(e.memory.redundancy);
  red.set_received_grad_bytes(e.memory.redundancy_grads);
  red.set_bytes_sent_per_rank(e.memory.redundancy_grads);
  red.set_seconds(e.time.redundancy);
}

}  // namespace

fsdp::proto::ShardingPlan to_proto(const Plan& plan) {
  fsdp::proto::ShardingPlan out;
  out.set_model(plan.model.name);
  out.set_num_params(plan.model.num_params());
  // Under expert parallelism the units are EP rank 0's (rank_units); every EP rank's have these sizes.
  auto* mesh = out.mutable_mesh();
  mesh->set_nodes(plan.mesh.nodes());
  mesh->set_chips_per_node(plan.mesh.chips_per_node());
  mesh->set_world_size(plan.mesh.world_size());
  mesh->set_replicate_degree(plan.mesh.replicate_degree());
  mesh->set_shard_degree(plan.mesh.shard_degree());
  mesh->set_shard_level(std::string(name(plan.mesh.shard_level())));
  mesh->set_replicate_level(std::string(name(plan.mesh.replicate_level())));
  mesh->set_expert_parallel_degree(plan.mesh.expert_parallel_degree());
  mesh->set_expert_shard_degree(plan.mesh.expert_shard_degree());
  mesh->set_expert_parallel_level(std::string(name(plan.mesh.expert_parallel_level())));
  const auto& c = plan.chip;
  auto* chip = out.mutable_chip();
  chip->set_name(c.name);
  chip->set_memory_bytes(c.memory_bytes);
  chip->set_hbm_bytes_per_s(c.hbm_bytes_per_s);
  chip->set_intra_bytes_per_s(c.intra_bytes_per_s);
  chip->set_intra_latency_s(c.intra_latency_s);
  chip->set_inter_bytes_per_s(c.inter_bytes_per_s);
  chip->set_inter_latency_s(c.inter_latency_s);
  chip->set_peak_flops_fp32(c.peak_flops_fp32);
  chip->set_peak_flops_bf16(c.peak_flops_bf16);
  chip->set_peak_flops_fp8(c.peak_flops_fp8);
  chip->set_matmul_efficiency(c.matmul_efficiency);
  chip->set_fp32_compute(c.fp32_compute);
  chip->set_mxfp8_quantize_s_per_element(c.mxfp8_quantize_seconds_per_element());
  chip->set_mxfp8_decode_s_per_element(c.mxfp8_decode_seconds_per_element());
  const auto& p = plan.policy;
  auto* pol = out.mutable_policy();
  pol->set_param_dtype(std::string(name(p.param_dtype)));
  pol->set_reduce_dtype(std::string(name(p.reduce_dtype)));
  pol->set_optimizer(std::string(name(p.optimizer)));
  pol->set_optimizer_state_bytes_per_element(spec::optimizer_state_bytes_per_element(p.optimizer));
  pol->set_reshard_after_forward(p.reshard.to_string());
  pol->set_prefetch_depth(p.prefetch);
  pol->set_activation_checkpointing(spec::ac_to_string(p));
  pol->set_micro_batch(p.micro_batch);
  pol->set_seq_len(p.seq_len);
  pol->set_grad_accum_steps(p.grad_accum);
  pol->set_global_batch(plan.global_batch());
  pol->set_headroom(plan.headroom);
  pol->set_param_comm(std::string(name(p.param_comm)));
  pol->set_grad_comm(std::string(name(p.grad_comm)));
  pol->set_loss(std::string(name(p.loss)));
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const auto& layout = plan.units[u];
    const auto& spec = plan.rank_model.units[u];
    auto* unit = out.add_units();
    unit->set_name(spec.name);
    unit->set_numel(layout.numel());
    unit->set_chunk_numel(layout.chunk_numel());
    unit->set_flat_numel(layout.flat_numel());
    for (size_t i = 0; i < spec.params.size(); ++i) {
      const auto& ps = spec.params[i];
      const auto& pl = layout.params()[i];
      auto* param = unit->add_params();
      param->set_name(ps.name);
      for (int64_t d : ps.shape) param->add_shape(d);
      param->set_dtype(std::string(name(ps.dtype)));
      param->set_numel(pl.numel());
      param->set_rows(pl.rows);
      param->set_row_numel(pl.row_numel);
      param->set_padded_rows(pl.padded_rows);
      param->set_rows_per_rank(pl.rows_per_rank);
      param->set_offset_in_chunk(pl.offset_in_chunk);
      param->set_ranks_with_rows(pl.ranks_with_rows());
    }
  }
  const auto& e = plan.estimate;
  auto* mem = out.mutable_memory();
  mem->set_param_shards(e.memory.param_shards);
  mem->set_grad_shards(e.memory.grad_shards);
  mem->set_optimizer_state(e.memory.optimizer_state);
  mem->set_all_gather_buffers(e.memory.all_gather_buffers);
  mem->set_reduce_scatter_buffers(e.memory.reduce_scatter_buffers);
  mem->set_unsharded_params(e.memory.unsharded_params);
  mem->set_unsharded_grads(e.memory.unsharded_grads);
  mem->set_kept_params(e.memory.kept_params);
  mem->set_activations(e.memory.activations);
  mem->set_model_states(e.memory.model_states());
  mem->set_peak(e.memory.peak());
  if (e.memory.redundancy > 0) set_redundancy(p, e, *out.mutable_redundancy());
  mem->set_capacity(e.capacity_bytes);
  mem->set_available(e.available_bytes);
  mem->set_fits(e.fits);
  for (const auto& ce : e.comm) {
    auto* comm = out.add_comm();
    comm->set_collective(ce.collective);
    comm->set_level(std::string(name(ce.level)));
    comm->set_group_size(ce.group_size);
    comm->set_calls(ce.calls);
    comm->set_buffer_bytes(ce.buffer_bytes);
    comm->set_bytes_sent_per_rank(static_cast<int64_t>(ce.bytes_sent_per_rank));
    comm->set_seconds(ce.seconds);
  }
  auto* t = out.mutable_time();
  t->set_compute(e.time.compute);
  t->set_recompute(e.time.recompute);
  t->set_communication(e.time.communication);
  t->set_exposed_communication(e.time.exposed_communication);
  t->set_optimizer(e.time.optimizer);
  t->set_step(e.time.step);
  t->set_model_flops_per_rank(e.time.model_flops_per_rank);
  t->set_mfu(e.time.mfu);
  t->set_tokens_per_s(e.time.tokens_per_s);
  t->set_all_to_all(e.time.all_to_all);
  t->set_mxfp8_codec(e.time.mxfp8_codec);
  for (const auto& n : plan.notes) out.add_notes(n);
  return out;
}

fsdp::proto::AutoPlanReport to_proto(const AutoPlanResult& r) {
  fsdp::proto::AutoPlanReport out;
  out.set_found(r.best.has_value());
  if (r.best) *out.mutable_best() = to_proto(*r.best);
  for (const auto& c : r.top) {
    auto* x = out.add_top();
    x->set_shard_degree(c.mesh.shard_degree());
    x->set_replicate_degree(c.mesh.replicate_degree());
    x->set_reshard_after_forward(c.policy.reshard.to_string());
    x->set_prefetch_depth(c.policy.prefetch);
    x->set_activation_checkpointing(spec::ac_to_string(c.policy));
    x->set_micro_batch(c.policy.micro_batch);
    x->set_grad_accum_steps(c.policy.grad_accum);
    x->set_peak_bytes(c.estimate.memory.peak());
    x->set_fits(c.estimate.fits);
    x->set_step_s(c.estimate.time.step);
    x->set_mfu(c.estimate.time.mfu);
    x->set_exposed_communication_s(c.estimate.time.exposed_communication);
    x->set_expert_parallel_degree(c.mesh.expert_parallel_degree());
    x->set_param_comm(std::string(name(c.policy.param_comm)));
    x->set_grad_comm(std::string(name(c.policy.grad_comm)));
  }
  out.set_evaluated(r.evaluated);
  out.set_fitting(r.fitting);
  out.set_explanation(r.explanation);
  return out;
}

std::string to_binary(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  {
    // The coded stream trims the string to what was written when it goes out of scope.
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!message.SerializeToCodedStream(&coded)) throw spec::SpecError("cannot serialise " + message.GetTypeName());
  }
  return out;
}

std::string to_text(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(message, &out);
  return out;
}

std::string to_json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  const auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) throw spec::SpecError("cannot write JSON: " + std::string(status.message()));
  return out;
}

void parse_binary(const std::string& bytes, google::protobuf::Message* message) {
  if (!message->ParseFromString(bytes)) throw spec::SpecError("malformed binary " + message->GetTypeName());
}

void parse_text(const std::string& text, google::protobuf::Message* message) {
  if (!google::protobuf::TextFormat::ParseFromString(text, message)) {
    throw spec::SpecError("malformed text " + message->GetTypeName());
  }
}

std::string format_plan(const fsdp::proto::ShardingPlan& plan, bool per_param) {
  std::ostringstream o;
  const auto& m = plan.mesh();
  const auto& p = plan.policy();
  o << "# fsdp-plan: " << plan.model() << " (" << fmt("%.3f", static_cast<double>(plan.num_params()) / 1e9)
    << " B params = " << plan.num_params() << ") on " << m.world_size() << " x " << plan.chip().name() << "\n";
  o << "mesh      nodes " << m.nodes() << " x " << m.chips_per_node() << " chips = world " << m.world_size()
    << "; replicate " << m.replicate_degree() << " (" << m.replicate_level() << ") x shard " << m.shard_degree() << " ("
    << m.shard_level() << ")";
  if (m.expert_parallel_degree() > 1) {
    o << "; expert parallel " << m.expert_parallel_degree() << " (" << m.expert_parallel_level() << ") x expert shard "
      << m.expert_shard_degree();
  }
  o << "\n";
  o << "policy    param " << p.param_dtype() << ", reduce " << p.reduce_dtype() << ", optimizer " << p.optimizer()
    << " (" << p.optimizer_state_bytes_per_element() << " B/elem), reshard_after_forward " << p.reshard_after_forward()
    << ", prefetch " << p.prefetch_depth() << ", ac " << p.activation_checkpointing();
  if (p.loss() == "eager") o << ", loss eager";
  if (p.param_comm() == "mxfp8" || p.grad_comm() == "mxfp8") {
    o << ", on the wire: params " << p.param_comm() << ", grads " << p.grad_comm();
  }
  o << "\n";
  o << "batch     micro-batch " << p.micro_batch() << " x seq " << p.seq_len() << ", accumulation "
    << p.grad_accum_steps() << ", global batch " << p.global_batch() << " sequences\n\n";

  const auto& mem = plan.memory();
  o << "memory per rank                GiB\n";
  auto row = [&](const char* what, int64_t bytes) { o << pad(what, 28, true) << pad(gib(bytes), 10) << "\n"; };
  row("  parameter shards", mem.param_shards());
  row("  gradient shards", mem.grad_shards());
  row("  optimizer state", mem.optimizer_state());
  row("  = model states", mem.model_states());
  row("  all-gather buffers", mem.all_gather_buffers());
  row("  unsharded parameters", mem.unsharded_params());
  row("  reduce-scatter buffers", mem.reduce_scatter_buffers());
  row("  unsharded gradients", mem.unsharded_grads());
  row("  params kept fwd->bwd", mem.kept_params());
  row("  activations", mem.activations());
  row("  = peak (at once)", mem.peak());
  row("  available", mem.available());
  o << "  fits: " << (mem.fits() ? "yes" : "NO") << " (capacity " << gib(mem.capacity()) << " GiB, headroom "
    << fmt("%.0f", p.headroom() * 100) << "%)\n";
  if (plan.has_redundancy()) {
    const auto& r = plan.redundancy();
    const auto mib = [](int64_t bytes) { return fmt("%.3f", static_cast<double>(bytes) / (1024.0 * 1024.0)); };
    o << "  redundancy: " << r.mode() << "  +" << mib(r.mirror_bytes())
      << " MiB per rank (mirror of rank r+1's shard and optimizer state; +" << mib(r.received_grad_bytes())
      << " MiB its grad shard from the exchange to the mirror's update, twice that during the exchange), +"
      << mib(r.bytes_sent_per_rank()) << " MiB sent per rank per step (" << fmt("%.5f", r.seconds()) << " s)\n";
  }
  o << "\n";

  o << "communication per step\n";
  o << pad("collective", 22, true) << pad("level", 7) << pad("group", 7) << pad("calls", 8) << pad("GiB sent/rank", 15)
    << pad("time s", 12) << "\n";
  for (const auto& c : plan.comm()) {
    o << pad(c.collective(), 22, true) << pad(c.level(), 7) << pad(std::to_string(c.group_size()), 7)
      << pad(std::to_string(c.calls()), 8) << pad(gib(c.bytes_sent_per_rank()), 15) << pad(fmt("%.5f", c.seconds()), 12)
      << "\n";
  }
  if (plan.comm().empty()) o << "  (none: a single rank)\n";
  const auto& t = plan.time();
  o << "\ntime per step (s)\n";
  o << "  compute " << fmt("%.5f", t.compute()) << " (recompute " << fmt("%.5f", t.recompute()) << "), communication "
    << fmt("%.5f", t.communication()) << ", exposed " << fmt("%.5f", t.exposed_communication()) << ", optimizer "
    << fmt("%.5f", t.optimizer());
  if (t.all_to_all() > 0) o << ", all-to-all " << fmt("%.5f", t.all_to_all()) << " (in exposed)";
  if (t.mxfp8_codec() > 0) o << ", mxfp8 codec " << fmt("%.5f", t.mxfp8_codec());
  o << "\n";
  o << "  step " << fmt("%.5f", t.step()) << ", MFU " << fmt("%.1f", t.mfu() * 100) << "%, "
    << fmt("%.0f", t.tokens_per_s()) << " tokens/s, " << fmt("%.3e", t.model_flops_per_rank())
    << " model FLOPs per rank\n\n";

  o << "units (elements)\n";
  o << pad("unit", 30, true) << pad("params", 7) << pad("numel", 14) << pad("chunk/rank", 13) << pad("flat buffer", 14)
    << pad("padding", 10) << "\n";
  auto same_shape = [](const fsdp::proto::UnitLayout& a, const fsdp::proto::UnitLayout& b) {
    return a.params_size() == b.params_size() && a.numel() == b.numel() && a.chunk_numel() == b.chunk_numel() &&
           a.flat_numel() == b.flat_numel();
  };
  const auto& units = plan.units();
  for (int i = 0; i < units.size();) {
    // Without --params, a run of identical units (the transformer blocks) prints as one row.
    int j = i + 1;
    while (!per_param && j < units.size() && same_shape(units[i], units[j])) ++j;
    const auto& u = units[i];
    const std::string label =
        j - i > 1 ? u.name() + ".." + units[j - 1].name() + " (x" + std::to_string(j - i) + ")" : u.name();
    o << pad(label, 30, true) << pad(std::to_string(u.params_size()), 7) << pad(std::to_string(u.numel()), 14)
      << pad(std::to_string(u.chunk_numel()), 13) << pad(std::to_string(u.flat_numel()), 14)
      << pad(std::to_string(u.flat_numel() - u.numel()), 10) << "\n";
    if (per_param) {
      for (const auto& q : u.params()) {
        std::string shape;
        for (int64_t d : q.shape()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
        o << "    " << pad(q.name(), 40, true) << pad(shape.empty() ? "scalar" : shape, 14) << " " << pad(q.dtype(), 8)
          << " rows/rank " << pad(std::to_string(q.rows_per_rank()), 7) << " padded "
          << pad(std::to_string(q.padded_rows()), 7) << " offset " << pad(std::to_string(q.offset_in_chunk()), 11)
          << " ranks " << q.ranks_with_rows() << "\n";
      }
    }
    i = j;
  }
  if (plan.notes_size() > 0) o << "\nnotes\n";
  for (const auto& n : plan.notes()) o << "  - " << n << "\n";
  return o.str();
}

std::string format_candidates(const fsdp::proto::AutoPlanReport& r) {
  std::ostringstream o;
  o << "# auto-plan: " << r.evaluated() << " configurations, " << r.fitting() << " fit\n";
  // The expert-parallel column only when a listed candidate uses it (dense models print as before).
  bool ep_column = false;
  for (const auto& c : r.top()) ep_column = ep_column || c.expert_parallel_degree() > 1;
  // The wire column only when a listed candidate sends MXFP8 ("mxfp8/default": all-gathers/reduce-scatters).
  bool comm_column = false;
  for (const auto& c : r.top()) comm_column = comm_column || c.param_comm() == "mxfp8" || c.grad_comm() == "mxfp8";
  auto comm = [](const std::string& s) { return s.empty() ? std::string("default") : s; };
  o << pad("#", 3) << pad("shard", 7) << (ep_column ? pad("ep", 5) : "") << (comm_column ? pad("ag/rs wire", 16) : "")
    << pad("repl", 6) << pad("reshard", 9)
    << pad("prefetch", 10) << pad("ac", 11) << pad("mb", 5) << pad("accum", 7) << pad("peak GiB", 10) << pad("fits", 6)
    << pad("step s", 11) << pad("MFU %", 8) << pad("exposed s", 11) << "\n";
  int i = 0;
  for (const auto& c : r.top()) {
    o << pad(std::to_string(++i), 3) << pad(std::to_string(c.shard_degree()), 7)
      << (ep_column ? pad(std::to_string(std::max<int64_t>(1, c.expert_parallel_degree())), 5) : "")
      << (comm_column ? pad(comm(c.param_comm()) + "/" + comm(c.grad_comm()), 16) : "")
      << pad(std::to_string(c.replicate_degree()), 6) << pad(c.reshard_after_forward(), 9)
      << pad(std::to_string(c.prefetch_depth()), 10) << pad(c.activation_checkpointing(), 11)
      << pad(std::to_string(c.micro_batch()), 5) << pad(std::to_string(c.grad_accum_steps()), 7)
      << pad(gib(c.peak_bytes()), 10) << pad(c.fits() ? "yes" : "no", 6) << " " << pad(fmt("%.4f", c.step_s()), 10)
      << pad(fmt("%.1f", c.mfu() * 100), 8) << " " << pad(fmt("%.4f", c.exposed_communication_s()), 10) << "\n";
  }
  o << "\n" << r.explanation() << "\n";
  return o.str();
}

}  // namespace fsdp::sharding
