// Plans: memory model, communication, determinism, protobuf round trip, auto-plan.
#include "sharding/planner.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "sharding/auto_planner.h"
#include "sharding/cost_model.h"
#include "sharding/plan_io.h"
#include "spec/checked_size.h"
#include "spec/mxfp8_wire.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {
namespace {

Plan plan_for(const std::string& model, const std::string& chip, spec::MeshSpec mesh,
              spec::Policy policy = spec::Policy()) {
  return make_plan(spec::model_preset(model), chip_preset(chip), spec::Mesh::create(mesh), policy);
}

TEST(PlannerTest, MemoryBreakdownFollowsTheRuntimesBuffers) {
  spec::Policy p;
  p.prefetch = 2;
  const Plan plan = plan_for("llama3-8b", "h100", spec::MeshSpec{1, 8}, p);
  const auto& m = plan.estimate.memory;
  int64_t largest_flat = 0, largest_numel = 0, shard_numel = 0, widest_window = 0;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const auto& u = plan.units[i];
    largest_flat = std::max(largest_flat, u.flat_numel());
    largest_numel = std::max(largest_numel, u.numel());
    shard_numel += u.chunk_numel();
    // A unit being waited for plus the two prefetched after it (or before it, in backward); each gathers
    // straight into its bf16 parameters (the compute dtype here): its chunk and its parameters in flight.
    int64_t window = 0;
    for (size_t j = i; j < std::min(i + 3, plan.units.size()); ++j) {
      window += plan.units[j].chunk_numel() + plan.units[j].numel();
    }
    widest_window = std::max(widest_window, window);
  }
  EXPECT_EQ(m.param_shards, 4 * shard_numel);
  EXPECT_EQ(m.grad_shards, 4 * shard_numel);
  EXPECT_EQ(m.optimizer_state, 8 * shard_numel);
  EXPECT_EQ(m.all_gather_buffers, 2 * widest_window);         // bf16
  EXPECT_EQ(m.unsharded_params, 2 * largest_numel);           // one unit copied out at a time
  EXPECT_EQ(m.reduce_scatter_buffers, 4 * largest_flat);      // one fp32 reduce-scatter in flight, in place
  EXPECT_EQ(m.unsharded_grads, 2 * largest_numel);
  EXPECT_EQ(m.kept_params, 0);
  // No checkpointing, 8192 tokens: the bf16 residual stream; per block the saved tensors
  // (6 * 4096 + 2 * 1024 + 4 * 14336 bf16) and fp32 statistics (2 norms + 32 heads); the head's input
  // and normed input (bf16), inverse RMS and target, bf16 logits and their fp32 softmax.
  const int64_t per_token = 4096 * 2 + 32 * ((6 * 4096 + 2 * 1024 + 4 * 14336) * 2 + (2 + 32) * 4) +
                            (2 * 4096 * 2 + 4 + 4 + 128256 * 6);
  EXPECT_EQ(m.activations, 8192 * per_token);
  // The peak is a moment: at least the model states and all activations (end of forward), at most
  // every category's maximum at once.
  EXPECT_GE(m.peak(), m.model_states() + m.activations);
  EXPECT_LE(m.peak(), m.model_states() + m.all_gather_buffers + m.unsharded_params + m.reduce_scatter_buffers +
                          m.unsharded_grads + m.kept_params + m.activations);
}

TEST(PlannerTest, ReshardPoliciesAndCheckpointingTradeMemory) {
  spec::Policy p;
  p.ac = spec::ActivationCheckpointing::kFull;
  const Plan full_plan = plan_for("llama3-70b", "trn3", spec::MeshSpec{1, 144}, p);
  const auto& full = full_plan.estimate;
  p.reshard = spec::Reshard::parse("false");
  const auto keep = plan_for("llama3-70b", "trn3", spec::MeshSpec{1, 144}, p).estimate;
  p.reshard = spec::Reshard::parse("8");
  const auto hpz = plan_for("llama3-70b", "trn3", spec::MeshSpec{1, 144}, p).estimate;
  int64_t total_numel = 0, total_flat = 0;
  for (const auto& u : full_plan.units) {
    total_numel += u.numel();
    total_flat += u.flat_numel();
  }
  EXPECT_EQ(full.memory.kept_params, 0);
  // false keeps every unit's copied-out parameters to backward; 8 keeps 1/8 of each all-gather buffer.
  EXPECT_EQ(keep.memory.unsharded_params, 2 * total_numel);
  EXPECT_EQ(hpz.memory.kept_params, 2 * (total_flat / 8));
  EXPECT_LT(hpz.memory.peak(), keep.memory.peak());
  EXPECT_LT(full.memory.peak(), hpz.memory.peak());
  // false: no backward all-gather; 8: backward all-gather over groups of 8.
  bool keep_has_backward = false;
  for (const auto& c : keep.comm) keep_has_backward |= c.collective == "all_gather_backward";
  EXPECT_FALSE(keep_has_backward);
  for (const auto& c : hpz.comm) {
    if (c.collective == "all_gather_backward") {
      EXPECT_EQ(c.group_size, 8);
    }
  }
  EXPECT_LT(keep.time.step, full.time.step);
}

// MXFP8 on the wire is priced at 33/32 bytes per element: 8.25/16 of bf16's all-gather bytes and
// 8.25/32 of f32's reduce-scatter bytes, and less time for both.
TEST(PlannerTest, Mxfp8CommunicationIsPricedAtItsWireBytes) {
  spec::Policy bf16;
  spec::Policy mx = bf16;
  mx.param_comm = spec::CommPrecision::kMxfp8;
  mx.grad_comm = spec::CommPrecision::kMxfp8;
  const Plan a = plan_for("llama3-8b", "h100", spec::MeshSpec{1, 8}, bf16);
  const Plan b = plan_for("llama3-8b", "h100", spec::MeshSpec{1, 8}, mx);
  ASSERT_EQ(a.estimate.comm.size(), b.estimate.comm.size());
  for (size_t i = 0; i < a.estimate.comm.size(); ++i) {
    const auto& x = a.estimate.comm[i];
    const auto& y = b.estimate.comm[i];
    const double ratio = x.collective == "reduce_scatter" ? 8.25 / 32 : 8.25 / 16;
    EXPECT_NEAR(static_cast<double>(y.buffer_bytes) / static_cast<double>(x.buffer_bytes), ratio, 1e-6) << x.collective;
    EXPECT_LT(y.seconds, x.seconds) << x.collective;
  }
  EXPECT_EQ(spec::parse_comm_precision("mxfp8"), spec::CommPrecision::kMxfp8);
  EXPECT_THROW(spec::parse_comm_precision("fp4"), spec::SpecError);
}

// The memory the runtime holds for MXFP8 (runtime/fsdp_unit.cc): an all-gather in flight holds only the
// wire slots (decoded straight into the parameters; a bf16 one its chunk and the parameters it lands in), each unit
// keeps its quantised shard, and a reduce-scatter holds an f32 input plus the sent and received slots.
TEST(PlannerTest, Mxfp8WireBuffersAreInTheMemoryTimeline) {
  spec::Policy bf16;
  bf16.prefetch = 0;
  spec::Policy mx = bf16;
  mx.param_comm = spec::CommPrecision::kMxfp8;
  mx.grad_comm = spec::CommPrecision::kMxfp8;
  const Plan a = plan_for("llama3-8b", "h100", spec::MeshSpec{1, 8}, bf16);
  const Plan b = plan_for("llama3-8b", "h100", spec::MeshSpec{1, 8}, mx);
  int64_t largest_flat = 0, largest_chunk = 0, slots = 0, largest_into_params = 0;
  for (const auto& u : b.units) {
    if (u.flat_numel() > largest_flat) {
      largest_flat = u.flat_numel();
      largest_chunk = u.chunk_numel();
    }
    largest_into_params = std::max(largest_into_params, u.chunk_numel() + u.numel());
    slots += spec::mxfp8_wire_bytes<int64_t>(u.chunk_numel());
  }
  const int64_t wire = spec::mxfp8_wire_bytes<int64_t>(largest_chunk) * 8;
  EXPECT_EQ(spec::mxfp8_wire_bytes<int64_t>(64), 66);
  EXPECT_EQ(spec::mxfp8_wire_bytes<int64_t>(65), 68);
  EXPECT_EQ(a.estimate.memory.all_gather_buffers, largest_into_params * 2);  // bf16 straight into the parameters
  EXPECT_EQ(b.estimate.memory.all_gather_buffers, wire);
  EXPECT_EQ(b.estimate.memory.param_shards, a.estimate.memory.param_shards + slots);
  EXPECT_EQ(a.estimate.memory.reduce_scatter_buffers, largest_flat * 4);
  EXPECT_EQ(b.estimate.memory.reduce_scatter_buffers, largest_flat * 4 + 2 * wire);
}

// MXFP8's codec is compute on the training thread, where runtime/fsdp_unit.cc spends it: the owner
// quantises its shard once per optimizer step, every gather decodes the unit's parameters, a reduce-scatter
// quantises the n - 1 chunks it sends and decodes those it receives. None without MXFP8.
TEST(PlannerTest, Mxfp8CodecTimeIsPricedWhereTheRuntimeSpendsIt) {
  ChipProfile chip = chip_preset("cpu");
  const double q = chip.mxfp8_quantize_seconds_per_element(), d = chip.mxfp8_decode_seconds_per_element();
  EXPECT_DOUBLE_EQ(q, 0.67e-9);
  EXPECT_DOUBLE_EQ(d, 0.39e-9);
  spec::Policy bf16;
  bf16.seq_len = 256;
  bf16.reshard = spec::Reshard{spec::Reshard::Mode::kNever, 0};  // one gather per unit and micro-step
  spec::Policy mx = bf16;
  mx.param_comm = spec::CommPrecision::kMxfp8;
  mx.grad_comm = spec::CommPrecision::kMxfp8;
  const spec::Mesh mesh = spec::Mesh::create(spec::MeshSpec{1, 2});
  const spec::ModelSpec model = spec::model_preset("llama3-debug");
  const Plan a = make_plan(model, chip, mesh, bf16);
  const Plan b = make_plan(model, chip, mesh, mx);
  EXPECT_EQ(a.estimate.time.mxfp8_codec, 0.0);
  double quantize = 0, decode = 0;
  for (const auto& u : b.units) {
    const auto chunk = static_cast<double>(u.chunk_numel());
    quantize += 2 * chunk * q;  // its shard, and the one chunk it sends
    decode += static_cast<double>(u.numel()) * d + chunk * d;  // the gather, and the one chunk it receives
  }
  EXPECT_NEAR(b.estimate.time.mxfp8_codec, quantize + decode, 1e-12);
  // A second micro-step gathers (and decodes) again but quantises the shard only once.
  mx.grad_accum = 2;
  const Plan c = make_plan(model, chip, mesh, mx);
  double second_decode = 0;
  for (const auto& u : c.units) second_decode += static_cast<double>(u.numel()) * d;
  EXPECT_NEAR(c.estimate.time.mxfp8_codec - b.estimate.time.mxfp8_codec, second_decode, 1e-12);
  // The step pays for it: a codec 100x slower lengthens the step by at least the difference.
  ChipProfile slow = chip;
  slow.mxfp8_quantize_s_per_element = 100 * q;
  slow.mxfp8_decode_s_per_element = 100 * d;
  const Plan e = make_plan(model, slow, mesh, mx);
  EXPECT_NEAR(e.estimate.time.mxfp8_codec, 100 * c.estimate.time.mxfp8_codec, 1e-9);
  EXPECT_GE(e.estimate.time.step - c.estimate.time.step,
            e.estimate.time.mxfp8_codec - c.estimate.time.mxfp8_codec - 1e-12);
  // Accelerators: from memory bandwidth (read f32, write 33/32 bytes; read 33/32, write bf16).
  const ChipProfile h100 = chip_preset("h100");
  EXPECT_DOUBLE_EQ(h100.mxfp8_quantize_seconds_per_element(), (4 + 33.0 / 32) / h100.hbm_bytes_per_s);
  EXPECT_DOUBLE_EQ(h100.mxfp8_decode_seconds_per_element(), (33.0 / 32 + 2) / h100.hbm_bytes_per_s);
  EXPECT_NE(format_plan(to_proto(e)).find("mxfp8 codec"), std::string::npos);
  EXPECT_EQ(format_plan(to_proto(a)).find("mxfp8 codec"), std::string::npos);
}

TEST(PlannerTest, AccumulationWithoutSyncHoldsEveryUnitsGradients) {
  spec::Policy p;
  p.grad_accum = 4;
  const Plan plan = plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 2}, p);
  int64_t total_numel = 0;
  for (const auto& u : plan.units) total_numel += u.numel();
  EXPECT_EQ(plan.estimate.memory.unsharded_grads, 4 * total_numel);  // fp32 compute on the cpu profile
  p.grad_accum = 1;
  EXPECT_LT(plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 2}, p).estimate.memory.peak(),
            plan.estimate.memory.peak());
}

TEST(ReshardAfterForward, DefaultKeepsTheLastUnit) {
  const spec::Reshard d;
  EXPECT_TRUE(d.reshards(0, 3));
  EXPECT_FALSE(d.reshards(2, 3));
  EXPECT_FALSE(spec::Reshard{spec::Reshard::Mode::kNever}.reshards(0, 3));
  // "always" gives up the last unit too (TorchTitan's policy names; FSDP2's true/false read as default/never).
  EXPECT_TRUE(spec::Reshard::parse("always").reshards(2, 3));
  EXPECT_EQ(spec::Reshard::parse("true"), spec::Reshard::parse("default"));
  EXPECT_EQ(spec::Reshard::parse("false"), spec::Reshard::parse("never"));
}

TEST(PlannerTest, ReshardGroupMustDivideShardDegree) {
  spec::Policy p;
  p.reshard = spec::Reshard::parse("7");
  EXPECT_THROW(plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 8}, p), spec::SpecError);
  EXPECT_THROW(spec::Reshard::parse("-2"), spec::SpecError);
  EXPECT_THROW(spec::Reshard::parse("maybe"), spec::SpecError);
}

TEST(PlannerTest, CommunicationVolumeAndLevels) {
  // HSDP 4 x 144: all-gathers and reduce-scatters inside the server, all-reduce across servers.
  spec::Policy p;
  p.ac = spec::ActivationCheckpointing::kFull;
  const Plan plan = plan_for("llama3-405b", "trn3", spec::MeshSpec{4, 144, 4, 144}, p);
  const auto& comm = plan.estimate.comm;
  ASSERT_EQ(comm.size(), 4u);
  int64_t flat = 0;
  for (const auto& u : plan.units) flat += u.flat_numel();
  for (const auto& c : comm) {
    SCOPED_TRACE(c.collective);
    EXPECT_EQ(c.calls, static_cast<int64_t>(plan.units.size()));
    if (c.collective == "all_reduce") {
      EXPECT_EQ(c.level, spec::LinkLevel::kInter);
      EXPECT_EQ(c.group_size, 4);
      EXPECT_EQ(c.buffer_bytes, 4 * flat / 144);
    } else {
      EXPECT_EQ(c.level, spec::LinkLevel::kIntra);
      EXPECT_EQ(c.buffer_bytes, (c.collective == "reduce_scatter" ? 4 : 2) * flat);
      EXPECT_NEAR(c.bytes_sent_per_rank, static_cast<double>(c.buffer_bytes) * 143 / 144, 1e3);
    }
  }
}

TEST(PlannerTest, AlphaBetaAndRoofline) {
  const Link link{100e9, 5e-6};
  EXPECT_DOUBLE_EQ(all_gather_seconds(1e9, 1, link), 0);
  EXPECT_NEAR(all_gather_seconds(1e9, 4, link), 3 * 5e-6 + 0.75e9 / 100e9, 1e-12);
  EXPECT_NEAR(all_reduce_seconds(1e9, 4, link), 2 * all_gather_seconds(1e9, 4, link), 1e-12);
  EXPECT_DOUBLE_EQ(roofline_seconds(1e12, 1e12, 1e9, 1e12), 1.0);
  EXPECT_DOUBLE_EQ(roofline_seconds(1e9, 1e12, 2e12, 1e12), 2.0);
}

TEST(PlannerTest, GroupAcrossServersIsHierarchicalOverRails) {
  const Link intra{300e9, 3e-6}, inter{25e9, 10e-6};
  // On one server: the server's link; one rank per server (an HSDP replicate group): the flat ring.
  EXPECT_DOUBLE_EQ(group_link(8, 1, intra, inter).bytes_per_s, 300e9);
  EXPECT_NEAR(all_gather_seconds(1e9, 8, group_link(8, 8, intra, inter)), all_gather_seconds(1e9, 8, inter), 1e-12);
  // 64 ranks over 8 servers of 8: each rank's NIC carries 7/8 of the buffer / 8, its server's links 7/8 of it.
  const double expected = 7.0 / 8 * 1e9 / 300e9 + 7.0 / 64 * 1e9 / 25e9 + 2 * 7 * 3e-6 + 7 * 10e-6;
  EXPECT_NEAR(all_gather_seconds(1e9, 64, group_link(64, 8, intra, inter)), expected, 1e-12);
  // Far below the flat ring over the network, which every byte would cross.
  EXPECT_LT(expected, all_gather_seconds(1e9, 64, inter) / 4);
  // More network or server bandwidth is never slower; more servers for the same group never faster.
  const double base = all_gather_seconds(1e9, 64, group_link(64, 8, intra, inter));
  EXPECT_LE(all_gather_seconds(1e9, 64, group_link(64, 8, intra, Link{50e9, 10e-6})), base);
  EXPECT_LE(all_gather_seconds(1e9, 64, group_link(64, 8, Link{600e9, 3e-6}, inter)), base);
  EXPECT_GE(all_gather_seconds(1e9, 64, group_link(64, 16, intra, inter)), base);
  // A group of 2 over "4 servers" (a strided expert group counted by its shard group's servers) spans 2.
  EXPECT_DOUBLE_EQ(group_link(2, 4, intra, inter).bytes_per_s, group_link(2, 2, intra, inter).bytes_per_s);
}

TEST(PlannerTest, AttentionAtItsOwnKernelRate) {
  // Attention's products priced at attention_efficiency: at the matmul rate it is the unset default;
  // a slower kernel lengthens compute by exactly those FLOPs' extra time, and the memory plan is unchanged.
  spec::Policy p;
  p.seq_len = 8192;
  ChipProfile chip = chip_preset("h100");
  const spec::ModelSpec model = spec::model_preset("llama3-8b");
  const spec::Mesh mesh = spec::Mesh::create(spec::MeshSpec{1, 8});
  chip.attention_efficiency = 0;
  const auto unset = make_plan(model, chip, mesh, p).estimate;
  chip.attention_efficiency = chip.matmul_efficiency;
  const auto same = make_plan(model, chip, mesh, p).estimate;
  EXPECT_DOUBLE_EQ(same.time.compute, unset.time.compute);
  chip.attention_efficiency = chip.matmul_efficiency / 2;
  const auto slow = make_plan(model, chip, mesh, p).estimate;
  // Causal: 2 + 5 products of T x q_dim per token per block, forward and backward, over 8192 x 1 tokens.
  const double attention_flops = 32 * 7.0 * 8192 * 4096 * 8192;
  const double peak = chip.peak_flops(DataType::kBfloat16);
  EXPECT_NEAR(slow.time.compute - unset.time.compute,
              attention_flops / (peak * chip.attention_efficiency) - attention_flops / (peak * chip.matmul_efficiency),
              1e-6 * unset.time.compute);
  EXPECT_EQ(slow.memory.peak(), unset.memory.peak());
}

TEST(PlannerTest, EagerLossHoldsTheLogitsFp32CopyAndLogSoftmaxGradients) {
  // A PyTorch job's head: the fp32 log-softmax stays saved (4 B a logit where the fused head keeps the
  // bf16 logits and their fp32 softmax, 6), the logits and their fp32 copy live through its forward,
  // and two fp32 gradients of the log-softmax through its backward.
  spec::Policy p;
  p.micro_batch = 2;
  const spec::ModelSpec model = spec::model_preset("llama3-8b");
  const auto units = spec::shard_model(model, 8);
  const auto fused = unit_memory(model, units, p, false, 1).back();
  p.loss = spec::LossImpl::kEager;
  const auto eager = unit_memory(model, units, p, false, 1).back();
  const int64_t logits = 2 * 8192 * int64_t{128256};
  EXPECT_EQ(fused.activations - eager.activations, logits * 2);
  EXPECT_EQ(eager.forward_scratch, logits * 6);
  EXPECT_EQ(eager.backward_scratch, logits * 8);
  EXPECT_EQ(fused.forward_scratch + fused.backward_scratch, 0);
  // The peak (the head's backward, every block's saves still held) grows by 6 B a logit; the plan says so.
  p.loss = spec::LossImpl::kFused;
  const Plan f = plan_for("llama3-8b", "h100", spec::MeshSpec{1, 8}, p);
  p.loss = spec::LossImpl::kEager;
  const Plan e = plan_for("llama3-8b", "h100", spec::MeshSpec{1, 8}, p);
  EXPECT_EQ(e.estimate.memory.peak() - f.estimate.memory.peak(), logits * 6);
  EXPECT_EQ(to_proto(e).policy().loss(), "eager");
  EXPECT_EQ(to_proto(f).policy().loss(), "fused");
  EXPECT_THROW(spec::parse_loss("unfused"), spec::SpecError);
}

TEST(PlannerTest, PrefetchOverlapsCommunication) {
  // The simulated step (tests/sharding/schedule_sim_test.cc has the known answers): prefetching hides
  // all-gathers behind compute, so exposed communication and the step shrink.
  spec::Policy p;
  p.prefetch = 0;
  const auto serial = plan_for("llama3-8b", "h100", spec::MeshSpec{2, 8}, p).estimate.time;
  p.prefetch = 1;
  const auto overlapped = plan_for("llama3-8b", "h100", spec::MeshSpec{2, 8}, p).estimate.time;
  EXPECT_DOUBLE_EQ(serial.compute, overlapped.compute);
  EXPECT_LT(overlapped.exposed_communication, serial.exposed_communication);
  EXPECT_LT(overlapped.step, serial.step);
}

// Norms, RoPE, SwiGLU, residuals and an unfused softmax are priced by the bytes they move: a fused causal
// kernel drops the softmax's share, and more memory bandwidth shortens the CPU step.
TEST(PlannerTest, NonMatmulPassesArePricedAtMemoryBandwidth) {
  const spec::ModelSpec m = spec::model_preset("llama3-debug");
  const spec::UnitSpec& block = m.units[1];
  const auto unfused = unit_elementwise_bytes_per_token(block, m.dims, 512, 4, false, false);
  const auto fused = unit_elementwise_bytes_per_token(block, m.dims, 512, 4, true, false);
  EXPECT_GT(unfused.forward, fused.forward);
  EXPECT_DOUBLE_EQ(unfused.forward - fused.forward, 5.0 * m.dims.n_heads * 512 * 4);
  EXPECT_DOUBLE_EQ(unfused.backward - fused.backward, 8.0 * m.dims.n_heads * 512 * 4);
  const auto head = unit_elementwise_bytes_per_token(m.units.back(), m.dims, 512, 4, false, true);
  EXPECT_DOUBLE_EQ(head.forward, (2.0 * m.dims.dim + 3.0 * m.dims.vocab) * 4);
  spec::Policy p;
  p.seq_len = 512;
  ChipProfile cpu = chip_preset("cpu");
  const double slow = make_plan(m, cpu, spec::Mesh::create(spec::MeshSpec{1, 1}), p).estimate.time.compute;
  cpu.hbm_bytes_per_s *= 2;
  const double fast = make_plan(m, cpu, spec::Mesh::create(spec::MeshSpec{1, 1}), p).estimate.time.compute;
  EXPECT_LT(fast, slow);
}

TEST(PlannerTest, StepTimeAndMfuAreSane) {
  spec::Policy p;
  p.ac = spec::ActivationCheckpointing::kFull;
  const auto e = plan_for("llama3-70b", "trn3", spec::MeshSpec{1, 144}, p).estimate;
  EXPECT_GT(e.time.step, 0);
  EXPECT_GT(e.time.mfu, 0.3);
  EXPECT_LT(e.time.mfu, 0.75);  // below the matmul efficiency, recompute costs a third more
  EXPECT_GT(e.time.recompute, 0);
  EXPECT_GE(e.time.step, e.time.compute);
  EXPECT_NEAR(e.time.model_flops_per_rank, model_flops_per_token(spec::model_preset("llama3-70b"), 8192) * 8192, 1e3);
}

// Each checkpointing mode: less memory than none, more recompute time (full > every 2nd block full >
// the op policy's three matmuls > none's 0); the plan file keeps mode and layer interval.
TEST(PlannerTest, CheckpointingModesTradeMemoryForRecompute) {
  auto estimate = [](const char* ac) {
    spec::Policy p;
    spec::parse_ac(ac, p);
    const Plan plan = plan_for("llama3-8b", "h100", spec::MeshSpec{1, 8}, p);
    EXPECT_EQ(to_proto(plan).policy().activation_checkpointing(), ac);
    return plan.estimate;
  };
  const auto none = estimate("none"), op = estimate("selective:op"), every2 = estimate("selective:2"),
             full = estimate("full");
  EXPECT_EQ(none.time.recompute, 0);
  EXPECT_GT(op.time.recompute, 0);
  EXPECT_GT(every2.time.recompute, op.time.recompute);
  EXPECT_GT(full.time.recompute, every2.time.recompute);
  EXPECT_NEAR(every2.time.recompute, full.time.recompute / 2, 1e-9 * full.time.recompute);  // 16 of 32 blocks
  EXPECT_LT(op.memory.peak(), none.memory.peak());
  EXPECT_LT(every2.memory.peak(), none.memory.peak());
  EXPECT_LT(full.memory.peak(), every2.memory.peak());
}

TEST(PlannerTest, DeterministicSerialisation) {
  spec::Policy p;
  p.ac = spec::ActivationCheckpointing::kSelective;
  const std::string a =
      to_binary(to_proto(plan_for("llama3-405b", "trn3", spec::MeshSpec{4, 144, 4, spec::kRestOfWorld}, p)));
  const std::string b =
      to_binary(to_proto(plan_for("llama3-405b", "trn3", spec::MeshSpec{4, 144, 4, spec::kRestOfWorld}, p)));
  EXPECT_EQ(a, b);
  EXPECT_GT(a.size(), 10000u);
  const auto pa = to_proto(plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 2}));
  EXPECT_EQ(format_plan(pa, true), format_plan(to_proto(plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 2})), true));
}

TEST(PlannerTest, ProtobufRoundTripBinaryTextJson) {
  const auto proto = to_proto(plan_for("mixtral-8x7b", "h200", spec::MeshSpec{2, 8, 2, spec::kRestOfWorld}));
  fsdp::proto::ShardingPlan from_binary;
  parse_binary(to_binary(proto), &from_binary);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(proto, from_binary));
  fsdp::proto::ShardingPlan from_text;
  parse_text(to_text(proto), &from_text);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(proto, from_text));
  const std::string json = to_json(proto);
  EXPECT_NE(json.find("\"rows_per_rank\""), std::string::npos);
  EXPECT_NE(json.find("layers.0.moe.experts.7.w3.weight"), std::string::npos);
  EXPECT_EQ(proto.units(1).params(0).rows_per_rank(), 4096 / 8);
  fsdp::proto::ShardingPlan junk;
  EXPECT_THROW(parse_binary("\xff\xff\xff", &junk), spec::SpecError);
}

TEST(PlannerTest, TableIsStableAndComplete) {
  const auto proto = to_proto(plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 2}));
  const std::string t = format_plan(proto);
  for (const char* s : {"memory per rank", "parameter shards", "all-gather buffers", "communication per step",
                        "reduce_scatter", "MFU", "layers.0..layers.5 (x6)"}) {
    EXPECT_NE(t.find(s), std::string::npos) << s;
  }
  const std::string detailed = format_plan(proto, true);
  for (const char* s : {"layers.3.attention.wq.weight", "tok_embeddings.weight", "rows/rank"}) {
    EXPECT_NE(detailed.find(s), std::string::npos) << s;
  }
}

TEST(PlannerTest, BadInputIsRefused) {
  spec::Policy p;
  p.micro_batch = 0;
  EXPECT_THROW(plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 2}, p), spec::SpecError);
  p = spec::Policy();
  p.seq_len = -5;
  EXPECT_THROW(plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 2}, p), spec::SpecError);
  p = spec::Policy();
  p.prefetch = -1;
  EXPECT_THROW(plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 2}, p), spec::SpecError);
  EXPECT_THROW(make_plan(spec::model_preset("llama3-debug"), chip_preset("cpu"),
                         spec::Mesh::create(spec::MeshSpec{1, 2}), spec::Policy(), 1.5),
               spec::SpecError);
  EXPECT_THROW(grad_accum_for(100, 8, 3), spec::SpecError);
  EXPECT_EQ(grad_accum_for(96, 8, 3), 4);
}

TEST(AutoPlanTest, PicksTheFastestFittingPlan) {
  AutoPlanOptions o;
  o.nodes = 1;
  o.chips_per_node = 144;
  o.global_batch = 288;
  const auto r = auto_plan(spec::model_preset("llama3-70b"), chip_preset("trn3"), o);
  ASSERT_TRUE(r.best.has_value());
  EXPECT_TRUE(r.best->estimate.fits);
  EXPECT_GT(r.evaluated, r.fitting);
  ASSERT_FALSE(r.top.empty());
  for (const auto& c : r.top) {
    EXPECT_TRUE(c.estimate.fits);
    EXPECT_GE(c.estimate.time.step * 1.001, r.top.front().estimate.time.step);
  }
  EXPECT_EQ(r.best->global_batch(), 288);
  EXPECT_NE(r.explanation.find("winner:"), std::string::npos);
  EXPECT_NE(r.explanation.find("configurations fit in memory"), std::string::npos);
  // Deterministic.
  const auto again = auto_plan(spec::model_preset("llama3-70b"), chip_preset("trn3"), o);
  EXPECT_EQ(to_binary(to_proto(r)), to_binary(to_proto(again)));
}

TEST(AutoPlanTest, ReportsNothingFitsWithNumbers) {
  AutoPlanOptions o;
  o.nodes = 4;
  o.chips_per_node = 2;
  o.base.seq_len = 2048;
  const auto r = auto_plan(spec::model_preset("llama3-405b"), chip_preset("cpu"), o);
  EXPECT_FALSE(r.best.has_value());
  EXPECT_EQ(r.fitting, 0);
  EXPECT_NE(r.explanation.find("nothing fits"), std::string::npos) << r.explanation;
  // 16 bytes x 405.85e9 / 8 chips = 756.0 GiB.
  EXPECT_NE(r.explanation.find("model states alone need 756.0 GiB per chip"), std::string::npos) << r.explanation;
  EXPECT_NE(r.explanation.find("7.2 GiB available"), std::string::npos) << r.explanation;
  EXPECT_NE(r.explanation.find("short by"), std::string::npos);
  EXPECT_FALSE(to_proto(r).found());
}

TEST(AutoPlanTest, RefusesUnevenGlobalBatch) {
  AutoPlanOptions o;
  o.nodes = 1;
  o.chips_per_node = 8;
  o.global_batch = 12;
  EXPECT_THROW(auto_plan(spec::model_preset("llama3-debug"), chip_preset("h100"), o), spec::SpecError);
  o.global_batch = 0;
  o.chips_per_node = 200;
  EXPECT_THROW(auto_plan(spec::model_preset("llama3-debug"), chip_preset("h100"), o), spec::SpecError);
}

// --auto chooses MXFP8 only when allowed, and then only where it pays: on a slow link its 33/64 of bf16's
// bytes win; on a fast link with an expensive codec the default does.
AutoPlanResult auto_on(const ChipProfile& chip, bool allow) {
  AutoPlanOptions o;
  o.nodes = 1;
  o.chips_per_node = 2;
  o.base.seq_len = 256;
  o.allow_mxfp8 = allow;
  return auto_plan(spec::model_preset("llama3-debug"), chip, o);
}

TEST(AutoPlanTest, ChoosesMxfp8OnlyWhereAllowedAndItPays) {
  ChipProfile slow_link = chip_preset("cpu");
  slow_link.intra_bytes_per_s = slow_link.inter_bytes_per_s = 0.01e9;
  const auto chosen = auto_on(slow_link, true);
  ASSERT_TRUE(chosen.best.has_value());
  EXPECT_EQ(chosen.best->policy.param_comm, spec::CommPrecision::kMxfp8) << chosen.explanation;
  EXPECT_EQ(chosen.best->policy.grad_comm, spec::CommPrecision::kMxfp8) << chosen.explanation;
  EXPECT_NE(chosen.explanation.find("mxfp8 all-gathers"), std::string::npos) << chosen.explanation;
  const auto report = to_proto(chosen);
  EXPECT_EQ(report.best().policy().param_comm(), "mxfp8");
  EXPECT_NE(format_candidates(report).find("mxfp8/mxfp8"), std::string::npos);

  const auto refused = auto_on(slow_link, false);
  ASSERT_TRUE(refused.best.has_value());
  EXPECT_EQ(refused.evaluated * 4, chosen.evaluated);
  for (const auto& c : refused.top) {
    EXPECT_EQ(c.policy.param_comm, spec::CommPrecision::kDefault);
    EXPECT_EQ(c.policy.grad_comm, spec::CommPrecision::kDefault);
  }
  EXPECT_GT(refused.best->estimate.time.step, chosen.best->estimate.time.step);

  ChipProfile fast_link = chip_preset("cpu");
  fast_link.intra_bytes_per_s = fast_link.inter_bytes_per_s = 1000e9;
  fast_link.mxfp8_quantize_s_per_element = fast_link.mxfp8_decode_s_per_element = 100e-9;
  const auto declined = auto_on(fast_link, true);
  ASSERT_TRUE(declined.best.has_value());
  EXPECT_EQ(declined.best->policy.param_comm, spec::CommPrecision::kDefault) << declined.explanation;
  EXPECT_EQ(declined.best->policy.grad_comm, spec::CommPrecision::kDefault) << declined.explanation;
}

// Absurd policies get a true estimate where int64 holds it, else a SizeOverflow naming the field that
// drives it: never a wrapped (small or negative) peak.
TEST(PlannerTest, AbsurdSizesGetAnEstimateOrANamedRefusal) {
  spec::Policy p;
  p.seq_len = 1000000000;  // the CPU reference's 2 x seq^2 fp32 scores: 8e18 bytes, still an int64
  const Plan plan = plan_for("llama3-debug", "cpu", spec::MeshSpec{1, 1}, p);
  EXPECT_GT(plan.estimate.memory.peak(), int64_t{8000000000000000000});
  EXPECT_FALSE(plan.estimate.fits);
  const auto driver = [](spec::Policy policy, const std::string& chip = "cpu") {
    try {
      plan_for("llama3-debug", chip, spec::MeshSpec{1, 1}, policy);
    } catch (const spec::SizeOverflow& e) {
      return e.driver();
    }
    return std::string("planned");
  };
  p.seq_len = 4000000000;  // seq^2 overflows
  EXPECT_EQ(driver(p), "seq_len");
  p.seq_len = int64_t{1} << 52;  // tokens x bytes per token overflow, on an accelerator too
  EXPECT_EQ(driver(p, "h100"), "seq_len");
  p = spec::Policy();
  p.micro_batch = int64_t{1} << 60;
  EXPECT_EQ(driver(p), "micro_batch");
  p = spec::Policy();
  p.grad_accum = int64_t{1} << 60;
  EXPECT_EQ(driver(p, "h100"), "grad_accum");
  // A vocabulary of 2^44: its logits overflow before the tokens' activations do.
  spec::ModelDims d = spec::model_preset("llama3-debug").dims;
  d.vocab = int64_t{1} << 44;
  try {
    make_plan(spec::make_llama("wide", d), chip_preset("h100"), spec::Mesh::create(spec::MeshSpec{1, 1}),
              spec::Policy());
    ADD_FAILURE() << "planned";
  } catch (const spec::SizeOverflow& e) {
    EXPECT_EQ(e.driver(), "vocab") << e.what();
  }
}

}  // namespace
}  // namespace fsdp::sharding
