// The schedule simulator: hand-built programs and steps with known answers (no overlap, perfect
// overlap, one slow link, link sharing, compute contention, latency apart from transfer), then properties of planned steps (more
// bandwidth never slower, more prefetch never less memory, repeated micro-steps add linearly) and the
// step program's memory against the planner's.
#include "sharding/schedule_sim.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "sharding/planner.h"

namespace fsdp::sharding {
namespace {

// n equal units: forward 1 s, backward 2 s, all-gathers 0.5 s on link 0, reduce-scatters on link 1.
StepSpec equal_units(int n, int64_t prefetch, double reduce_seconds, double optimizer_seconds) {
  StepSpec s;
  s.policy.prefetch = prefetch;
  s.units.resize(static_cast<size_t>(n));
  for (auto& u : s.units) {
    u.forward = 1;
    u.backward = 2;
    u.optimizer = optimizer_seconds;
    u.all_gather = SimCollective{0.5, 0, kStreamGather, 100};
    u.all_gather_backward = u.all_gather;
    u.reduce_scatter = SimCollective{reduce_seconds, 1, kStreamReduce, 200};
  }
  return s;
}

TEST(ScheduleSim, NoOverlapAddsEveryCollective) {
  // Prefetch 0: each forward waits for its gather (4 x 0.5); backward gathers again all but the last
  // unit, which default resharding keeps (3 x 0.5); the reduce-scatters (link 1) hide behind the next
  // gather and backward except the last, which finalize_backward waits for.
  const StepSimulation r = simulate_step(equal_units(4, 0, 0.5, 0), SimOptions{});
  EXPECT_DOUBLE_EQ(r.compute, 12.0);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 2.0 + 1.5 + 0.5);
  EXPECT_DOUBLE_EQ(r.step, 16.0);
}

TEST(ScheduleSim, PrefetchHidesAllButTheLastReduceScatter) {
  // Prefetch 1 and 0.5 s of optimizer per unit: the next step's first gathers run behind the optimizer,
  // every other gather behind the compute of the unit before; only the last reduce-scatter shows.
  const StepSimulation r = simulate_step(equal_units(4, 1, 0.5, 0.5), SimOptions{});
  EXPECT_DOUBLE_EQ(r.compute, 12.0 + 2.0);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 0.5);
  EXPECT_DOUBLE_EQ(r.step, 14.5);
}

TEST(ScheduleSim, OneSlowLinkExposesItsReduceScatters) {
  // Reduce-scatters of 3 s on their own link, after backwards of 2 s: each post_backward waits 1 s for
  // the previous unit's (one in flight at a time), finalize_backward the whole last one.
  const StepSimulation r = simulate_step(equal_units(4, 1, 3.0, 0.5), SimOptions{});
  EXPECT_DOUBLE_EQ(r.exposed_communication, 1 + 1 + 1 + 3);
  EXPECT_DOUBLE_EQ(r.step, 14.0 + 6.0);
}

// A program of its own: issue two collectives, compute, wait for both.
Program two_collectives(int link_a, int link_b, double compute_seconds) {
  Program p;
  p.calls = {CollectiveCall{SimCollective{1.0, link_a, kStreamGather, 1}, SpanKind::kAllGather, 0},
             CollectiveCall{SimCollective{1.0, link_b, kStreamReduce, 1}, SpanKind::kReduceScatter, 0}};
  p.instructions = {Instruction{.op = Op::kIssue, .call = 0}, Instruction{.op = Op::kIssue, .call = 1},
                    Instruction{.op = Op::kCompute, .kind = SpanKind::kForward, .unit = 0, .seconds = compute_seconds},
                    Instruction{.op = Op::kWait, .call = 0}, Instruction{.op = Op::kWait, .call = 1}};
  p.segments = {Segment{0, p.instructions.size(), 1}};
  return p;
}

TEST(ScheduleSim, CollectivesOnOneLinkShareIt) {
  EXPECT_DOUBLE_EQ(simulate(two_collectives(0, 1, 0), SimOptions{}).step, 1.0);
  EXPECT_DOUBLE_EQ(simulate(two_collectives(0, 0, 0), SimOptions{}).step, 2.0);
}

TEST(ScheduleSim, ContentionSlowsComputeAndCommunicationWhileTheyOverlap) {
  // One collective of 1 s beside 1 s of compute (the other on a link of its own, also overlapped).
  Program p = two_collectives(0, 1, 1.0);
  EXPECT_DOUBLE_EQ(simulate(p, SimOptions{0.0}).step, 1.0);
  EXPECT_DOUBLE_EQ(simulate(p, SimOptions{1.0}).step, 2.0);  // one core time-sliced
  EXPECT_DOUBLE_EQ(simulate(p, SimOptions{0.5}).step, 1.5);
  const StepSimulation r = simulate(p, SimOptions{1.0, true});
  EXPECT_DOUBLE_EQ(r.compute, 2.0);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 0.0);
  ASSERT_EQ(r.spans.size(), 3u);
}

TEST(ScheduleSim, LatencyNeitherSharesTheLinkNorTakesTheCores) {
  // All latency: two collectives on one link overlap whole behind 1 s of compute (as transfers they
  // would share it: 2 s), and under contention the compute beside them runs at full rate.
  Program p = two_collectives(0, 0, 1.0);
  EXPECT_DOUBLE_EQ(simulate(p, SimOptions{}).step, 2.0);
  for (auto& c : p.calls) c.collective.latency_seconds = 1.0;
  EXPECT_DOUBLE_EQ(simulate(p, SimOptions{}).step, 1.0);
  Program q = two_collectives(0, 1, 1.0);
  for (auto& c : q.calls) c.collective.latency_seconds = 1.0;
  EXPECT_DOUBLE_EQ(simulate(q, SimOptions{1.0}).step, 1.0);
  // Half latency under contention 1: 0.5 s at full rate, then the remaining 0.5 s of compute and of each
  // transfer (links of their own) at half rate: all end at 1.5 s, the compute stretched to 1.5 s.
  for (auto& c : q.calls) c.collective.latency_seconds = 0.5;
  const StepSimulation r = simulate(q, SimOptions{1.0});
  EXPECT_DOUBLE_EQ(r.step, 1.5);
  EXPECT_DOUBLE_EQ(r.compute, 1.5);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 0.0);
}

TEST(ScheduleSim, ACollectiveWaitedForAtOnceSkipsItsLatency) {
  // Issued and waited for with no compute between: the waiting thread drives it, only the transfer counts.
  Program p;
  p.calls = {CollectiveCall{SimCollective{1.0, 0, kStreamGather, 1, 0.75}, SpanKind::kAllGather, 0}};
  p.instructions = {Instruction{.op = Op::kIssue, .call = 0}, Instruction{.op = Op::kWait, .call = 0}};
  p.segments = {Segment{0, p.instructions.size(), 1}};
  EXPECT_DOUBLE_EQ(simulate(p, SimOptions{}).step, 0.25);
  // Waited for after 0.5 s of compute: 0.5 s of latency passed behind it, the other 0.25 s is skipped.
  p.instructions.insert(p.instructions.begin() + 1,
                        Instruction{.op = Op::kCompute, .kind = SpanKind::kForward, .unit = 0, .seconds = 0.5});
  p.segments = {Segment{0, p.instructions.size(), 1}};
  const StepSimulation r = simulate(p, SimOptions{});
  EXPECT_DOUBLE_EQ(r.step, 0.75);
  EXPECT_DOUBLE_EQ(r.exposed_communication, 0.25);
}

TEST(ScheduleSim, WaitingForACollectiveNeverIssuedThrows) {
  Program p = two_collectives(0, 1, 1.0);
  p.instructions.erase(p.instructions.begin() + 1);  // call 1 is never issued
  p.segments = {Segment{0, p.instructions.size(), 1}};
  EXPECT_THROW(simulate(p, SimOptions{}), std::logic_error);
}

TEST(ScheduleSim, TraceSpansFollowTheRuntimesOrder) {
  const StepSimulation r = simulate_step(equal_units(3, 1, 0.5, 0.5), SimOptions{0, true});
  std::vector<std::pair<SpanKind, int>> compute;
  double last_end = -1e9;
  for (const auto& s : r.spans) {
    if (is_communication(s.kind) || s.start < 0) continue;
    compute.emplace_back(s.kind, s.unit);
    EXPECT_GE(s.start + 1e-12, last_end);  // one training thread: compute spans never overlap
    last_end = s.start + s.duration;
  }
  const std::vector<std::pair<SpanKind, int>> expected = {
      {SpanKind::kForward, 0},   {SpanKind::kForward, 1},   {SpanKind::kForward, 2},   {SpanKind::kBackward, 2},
      {SpanKind::kBackward, 1},  {SpanKind::kBackward, 0},  {SpanKind::kOptimizer, 0}, {SpanKind::kOptimizer, 1},
      {SpanKind::kOptimizer, 2}};
  EXPECT_EQ(compute, expected);
  EXPECT_NEAR(last_end, r.step, 1e-9);
}

// MXFP8's codec runs on the training thread where runtime/fsdp_unit.cc runs it: the shard's quantise
// right before its first all-gather is issued (once per step), each gather's decode after its wait (the
// copy-out), the reduce-scatter's quantise before it is issued and its decode-add after it is waited for.
TEST(ScheduleSim, Mxfp8CodecSitsWhereTheRuntimeRunsIt) {
  StepSpec spec = equal_units(3, 0, 0.5, 0.5);
  const StepSpec plain = spec;
  spec.policy.param_comm = spec.policy.grad_comm = spec::CommPrecision::kMxfp8;
  for (auto& u : spec.units) {
    u.gather_quantize = 0.1;
    u.gather_decode = 0.2;
    u.reduce_quantize = 0.3;
    u.reduce_decode = 0.4;
  }
  const Program p = step_program(spec);
  // Per step: 3 quantised shards, 3 forward + 2 backward gathers decoded (the last unit stays unsharded),
  // 3 reduce-scatters each way.
  EXPECT_NEAR(compute_seconds(p, SpanKind::kMxfp8Codec), 3 * 0.1 + 5 * 0.2 + 3 * 0.3 + 3 * 0.4, 1e-12);
  EXPECT_EQ(compute_seconds(step_program(plain), SpanKind::kMxfp8Codec), 0.0);
  int checked = 0;
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction& in = p.instructions[i];
    if (in.op != Op::kCompute || in.kind != SpanKind::kMxfp8Codec) continue;
    ++checked;
    if (in.seconds == 0.1 || in.seconds == 0.3) {  // quantise: the next instruction issues this unit's collective
      ASSERT_LT(i + 1, p.instructions.size());
      EXPECT_EQ(p.instructions[i + 1].op, Op::kIssue);
      EXPECT_EQ(p.calls[p.instructions[i + 1].call].kind,
                in.seconds == 0.1 ? SpanKind::kAllGather : SpanKind::kReduceScatter);
      EXPECT_EQ(p.instructions[i + 1].unit, in.unit);
    } else {  // decode: after waiting for this unit's collective (memory bookkeeping aside)
      size_t j = i;
      while (j > 0 && p.instructions[j - 1].op == Op::kMemory) --j;
      ASSERT_GT(j, 0u);
      EXPECT_EQ(p.instructions[j - 1].op, Op::kWait);
      EXPECT_EQ(p.instructions[j - 1].unit, in.unit);
      EXPECT_EQ(p.calls[p.instructions[j - 1].call].kind,
                in.seconds == 0.2 ? SpanKind::kAllGather : SpanKind::kReduceScatter);
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_FALSE(is_communication(SpanKind::kMxfp8Codec));
  EXPECT_GT(simulate(p, SimOptions{}).step, simulate_step(plain, SimOptions{}).step);
}

Plan plan_with(const std::string& model, ChipProfile chip, spec::MeshSpec mesh, spec::Policy policy) {
  return make_plan(spec::model_preset(model), chip, spec::Mesh::create(mesh), policy);
}

TEST(ScheduleSim, MoreBandwidthIsNeverSlower) {
  for (const char* chip_name : {"h100", "cpu"}) {
    for (int64_t prefetch : {0, 1, 2}) {
      SCOPED_TRACE(std::string(chip_name) + " prefetch " + std::to_string(prefetch));
      spec::Policy p;
      p.prefetch = prefetch;
      p.seq_len = 512;
      double previous = 1e300;
      for (double scale : {0.01, 0.1, 0.5, 1.0, 2.0, 10.0}) {
        ChipProfile c = chip_preset(chip_name);
        c.intra_bytes_per_s *= scale;
        c.inter_bytes_per_s *= scale;
        const Plan plan =
            plan_with(std::string(chip_name) == "cpu" ? "llama3-debug" : "llama3-8b", c, spec::MeshSpec{2, 4}, p);
        EXPECT_LE(plan.estimate.time.step, previous * (1 + 1e-12)) << "bandwidth x" << scale;
        previous = plan.estimate.time.step;
      }
    }
  }
}

TEST(ScheduleSim, MorePrefetchNeverLessMemory) {
  for (const char* reshard : {"default", "never", "2"}) {
    SCOPED_TRACE(reshard);
    spec::Policy p;
    p.seq_len = 512;
    p.reshard = spec::Reshard::parse(reshard);
    int64_t previous = 0;
    for (int64_t prefetch = 0; prefetch <= 4; ++prefetch) {
      p.prefetch = prefetch;
      const Plan plan = plan_with("llama3-debug", chip_preset("cpu"), spec::MeshSpec{1, 4}, p);
      EXPECT_GE(plan.estimate.memory.peak(), previous) << "prefetch " << prefetch;
      previous = plan.estimate.memory.peak();
      // The simulated step holds the planner's peak exactly: one replay of the runtime for both.
      EXPECT_EQ(simulate_step(plan.schedule, SimOptions{}).peak_bytes, plan.estimate.memory.peak());
    }
  }
}

TEST(ScheduleSim, MicroStepsWithoutSyncAddLinearly) {
  spec::Policy p;
  p.seq_len = 512;
  std::vector<double> steps;
  for (int64_t accum = 1; accum <= 5; ++accum) {
    p.grad_accum = accum;
    steps.push_back(plan_with("llama3-debug", chip_preset("cpu"), spec::MeshSpec{1, 2}, p).estimate.time.step);
  }
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_GT(steps[i], steps[i - 1]);
  // From 3 on, one more micro-step adds one middle micro-step's time.
  EXPECT_NEAR(steps[4] - steps[3], steps[3] - steps[2], 1e-9 * steps[4]);
}

TEST(ScheduleSim, ContentionMakesTheCpuStepSlower) {
  spec::Policy p;
  p.seq_len = 512;
  ChipProfile cpu = chip_preset("cpu");
  const double shared = plan_with("llama3-debug", cpu, spec::MeshSpec{1, 2}, p).estimate.time.step;
  cpu.comm_compute_contention = 0;
  const double separate = plan_with("llama3-debug", cpu, spec::MeshSpec{1, 2}, p).estimate.time.step;
  EXPECT_GT(shared, separate);
}

}  // namespace
}  // namespace fsdp::sharding
