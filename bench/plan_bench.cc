// fsdp-plan-bench: how long planning takes. The issue asks for 405B over 144 and 4 x 144 chips in under
// a second; this prints the median of several runs of each, for plain plans and auto-plans.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "sharding/auto_planner.h"
#include "sharding/plan_io.h"
#include "sharding/schedule_sim.h"

namespace fs = fsdp::sharding;
namespace sp = fsdp::spec;

namespace {

constexpr int kRuns = 7;

struct Stats {
  double min_ms, median_ms, max_ms;
};

Stats time_it(const std::function<void()>& fn) {
  std::vector<double> ms;
  for (int i = 0; i < kRuns; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2], ms.back()};
}

}  // namespace

int main() {
  const sp::ModelSpec model = sp::model_preset("llama3-405b");
  const fs::ChipProfile chip = fs::chip_preset("trn3");
  std::printf("# fsdp-plan-bench: llama3-405b on trn3, %d runs each, milliseconds\n", kRuns);
  std::printf("%-44s %10s %10s %10s\n", "what", "min", "median", "max");
  size_t sink = 0;
  for (int64_t nodes : {1, 4}) {
    const std::string mesh = std::to_string(nodes) + " x 144";
    sp::Policy policy;
    policy.ac = sp::ActivationCheckpointing::kFull;
    const sp::Mesh m = sp::Mesh::create(sp::MeshSpec{nodes, 144, 1, sp::kRestOfWorld});
    const Stats plan = time_it([&] { sink += fs::make_plan(model, chip, m, policy).units.size(); });
    std::printf("%-44s %10.2f %10.2f %10.2f\n", ("plan " + mesh + " (layout + cost)").c_str(), plan.min_ms,
                plan.median_ms, plan.max_ms);
    // The schedule simulator alone, every span and memory point recorded (what fsdp-plan --trace writes).
    const fs::Plan made = fs::make_plan(model, chip, m, policy);
    const Stats sim = time_it([&] {
      sink += fs::simulate_step(made.schedule, {chip.comm_compute_contention, true}).spans.size();
    });
    std::printf("%-44s %10.2f %10.2f %10.2f\n", ("simulated step " + mesh + " (recorded)").c_str(), sim.min_ms,
                sim.median_ms, sim.max_ms);
    const Stats full =
        time_it([&] { sink += fs::to_binary(fs::to_proto(fs::make_plan(model, chip, m, policy))).size(); });
    std::printf("%-44s %10.2f %10.2f %10.2f\n", ("plan " + mesh + " + protobuf").c_str(), full.min_ms, full.median_ms,
                full.max_ms);
    fs::AutoPlanOptions o;
    o.nodes = nodes;
    o.chips_per_node = 144;
    o.global_batch = nodes * 144 * 4;
    int64_t evaluated = 0;
    const Stats autop = time_it([&] {
      const auto r = fs::auto_plan(model, chip, o);
      evaluated = r.evaluated;
      sink += r.top.size();
    });
    std::printf("%-44s %10.2f %10.2f %10.2f\n",
                ("auto-plan " + mesh + " (" + std::to_string(evaluated) + " configs)").c_str(), autop.min_ms,
                autop.median_ms, autop.max_ms);
  }
  return sink == 0 ? 1 : 0;
}
