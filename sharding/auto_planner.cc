#include "sharding/auto_planner.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

#include "sharding/cost_model.h"
#include "spec/spec_error.h"

namespace fsdp::sharding {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kTieFraction = 0.001;

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i) d.push_back(n / i);
    }
  }
  std::sort(d.begin(), d.end());
  return d;
}

// true, false, and secondary groups worth trying: the server size (backward gathers stay on the fast
// links) and 8 (a common hpZ choice), when they properly divide the shard degree.
std::vector<spec::Reshard> reshard_choices(int64_t shard, int64_t chips_per_node) {
  std::vector<spec::Reshard> r = {spec::Reshard{spec::Reshard::Mode::kDefault, 0}};
  if (shard == 1) return r;
  r.push_back(spec::Reshard{spec::Reshard::Mode::kNever, 0});
  for (int64_t k : {chips_per_node, int64_t{8}}) {
    if (k > 1 && k < shard && shard % k == 0 && (r.size() < 3 || r[2].group != k)) {
      r.push_back(spec::Reshard{spec::Reshard::Mode::kGroup, k});
    }
  }
  return r;
}

// How many of the two collectives carry MXFP8: a tie goes to the plan that changes the numerics less.
int mxfp8_count(const spec::Policy& p) {
  return (p.param_comm == spec::CommPrecision::kMxfp8 ? 1 : 0) + (p.grad_comm == spec::CommPrecision::kMxfp8 ? 1 : 0);
}

int reshard_rank(const spec::Reshard& r) {
  return r.mode == spec::Reshard::Mode::kDefault ? 0 : r.mode == spec::Reshard::Mode::kGroup ? 1 : 2;
}

// Total order so the result never depends on evaluation order: fitting first, then faster, then
// smaller, then a fixed preference for the simpler configuration.
bool better(const AutoCandidate& a, const AutoCandidate& b) {
  if (a.estimate.fits != b.estimate.fits) return a.estimate.fits;
  if (a.estimate.fits && a.estimate.time.step != b.estimate.time.step)
    return a.estimate.time.step < b.estimate.time.step;
  if (a.estimate.memory.peak() != b.estimate.memory.peak()) return a.estimate.memory.peak() < b.estimate.memory.peak();
  auto key = [](const AutoCandidate& c) {
    return std::make_tuple(mxfp8_count(c.policy), c.mesh.shard_degree(), c.mesh.expert_parallel_degree(),
                           reshard_rank(c.policy.reshard),
                           c.policy.reshard.group, c.policy.prefetch, static_cast<int>(c.policy.ac),
                           -c.policy.micro_batch);
  };
  return key(a) < key(b);
}

std::string gib(double bytes) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << bytes / kGiB << " GiB";
  return s.str();
}

std::string seconds(double s) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(s < 1 ? 4 : 3);
  o << s << " s";
  return o.str();
}

std::string differences(const AutoCandidate& a, const AutoCandidate& b) {
  std::vector<std::string> d;
  auto add = [&](const std::string& what, const std::string& x, const std::string& y) {
    if (x != y) d.push_back(what + " " + x + " vs " + y);
  };
  add("shard", std::to_string(a.mesh.shard_degree()), std::to_string(b.mesh.shard_degree()));
  add("expert parallel", std::to_string(a.mesh.expert_parallel_degree()),
      std::to_string(b.mesh.expert_parallel_degree()));
  add("reshard", a.policy.reshard.to_string(), b.policy.reshard.to_string());
  add("prefetch", std::to_string(a.policy.prefetch), std::to_string(b.policy.prefetch));
  add("ac", spec::ac_to_string(a.policy), spec::ac_to_string(b.policy));
  add("micro-batch", std::to_string(a.policy.micro_batch), std::to_string(b.policy.micro_batch));
  add("all-gathers", std::string(name(a.policy.param_comm)), std::string(name(b.policy.param_comm)));
  add("reduce-scatters", std::string(name(a.policy.grad_comm)), std::string(name(b.policy.grad_comm)));
  std::string out;
  for (const auto& x : d) out += (out.empty() ? "" : ", ") + x;
  return out.empty() ? "nothing" : out;
}

}  // namespace

std::string AutoCandidate::describe() const {
  std::ostringstream s;
  s << "shard " << mesh.shard_degree();
  if (mesh.expert_parallel_degree() > 1) s << " (expert parallel " << mesh.expert_parallel_degree() << ")";
  s << " x replicate " << mesh.replicate_degree() << ", reshard " << policy.reshard.to_string() << ", prefetch "
    << policy.prefetch << ", ac " << spec::ac_to_string(policy) << ", micro-batch " << policy.micro_batch << " x "
    << policy.grad_accum << " accumulation";
  if (policy.param_comm == spec::CommPrecision::kMxfp8) s << ", mxfp8 all-gathers";
  if (policy.grad_comm == spec::CommPrecision::kMxfp8) s << ", mxfp8 reduce-scatters";
  return s.str();
}

namespace {

// Every configuration of the search space, estimated: shard degree x expert parallelism x reshard x
// prefetch x activation checkpointing x micro-batch x communication precision.
std::vector<AutoCandidate> evaluate_candidates(const spec::ModelSpec& model, const ChipProfile& chip,
                                               const AutoPlanOptions& o, int64_t world, int64_t per_rank,
                                               const std::vector<int64_t>& micro_batches,
                                               const std::vector<int64_t>& ep_choices, AutoPlanResult& result) {
  const int64_t experts = model.dims.moe.num_experts;
  using CommChoice = std::pair<spec::CommPrecision, spec::CommPrecision>;  // all-gathers, reduce-scatters
  std::vector<CommChoice> comm_choices = {{o.base.param_comm, o.base.grad_comm}};
  if (o.allow_mxfp8) {
    constexpr auto kDef = spec::CommPrecision::kDefault, kMx = spec::CommPrecision::kMxfp8;
    comm_choices = {{kDef, kDef}, {kMx, kDef}, {kDef, kMx}, {kMx, kMx}};
  }
  std::vector<AutoCandidate> all;
  for (int64_t shard : divisors(world)) {
    for (int64_t ep : ep_choices) {
      if (ep < 1 || shard % ep != 0 || (ep > 1 && (experts == 0 || experts % ep != 0))) continue;
      const spec::Mesh mesh = spec::Mesh::create(spec::MeshSpec{o.nodes, o.chips_per_node, world / shard, shard, ep});
      const spec::ModelSpec rank_model = rank_units(model, mesh);
      const auto units = shard_rank_units(rank_model, mesh);
      for (const spec::Reshard& reshard : reshard_choices(shard, o.chips_per_node)) {
        for (int64_t prefetch : o.prefetch_choices) {
          for (auto ac : {spec::ActivationCheckpointing::kNone, spec::ActivationCheckpointing::kSelective,
                          spec::ActivationCheckpointing::kFull}) {
            for (int64_t mb : micro_batches) {
              for (const auto& [param_comm, grad_comm] : comm_choices) {
                // The runtime refuses MXFP8 reduce-scatters under expert parallelism (runtime/fsdp_model.cc).
                if (o.allow_mxfp8 && ep > 1 && grad_comm == spec::CommPrecision::kMxfp8) continue;
                spec::Policy p = o.base;
                p.reshard = reshard;
                p.prefetch = prefetch;
                p.ac = ac;
                p.micro_batch = mb;
                p.grad_accum = per_rank / mb;
                p.param_comm = param_comm;
                p.grad_comm = grad_comm;
                AutoCandidate c{mesh, p, estimate_plan(rank_model, units, chip, mesh, p, o.headroom)};
                ++result.evaluated;
                if (c.estimate.fits) ++result.fitting;
                all.push_back(std::move(c));
              }
            }
          }
        }
      }
    }
  }
  return all;
}

// Step times closer than the model can tell apart: among fitting plans within kTieFraction of the
// fastest, take the one with the fewest MXFP8 collectives (MXFP8 only where it pays), then the smallest
// peak memory (more slack for what the model misses). True when that moved a plan to the front.
bool break_ties(std::vector<AutoCandidate>& all) {
  bool tie_broken = false;
  if (all.front().estimate.fits) {
    const double limit = all.front().estimate.time.step * (1 + kTieFraction);
    auto rank = [&](size_t i) { return std::make_pair(mxfp8_count(all[i].policy), all[i].estimate.memory.peak()); };
    size_t pick = 0;
    for (size_t i = 1; i < all.size() && all[i].estimate.fits && all[i].estimate.time.step <= limit; ++i) {
      if (rank(i) < rank(pick)) pick = i;
    }
    if (pick != 0) {
      std::rotate(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(pick),
                  all.begin() + static_cast<std::ptrdiff_t>(pick) + 1);
      tie_broken = true;
    }
  }
  return tie_broken;
}

// The winner, why it won (against the runner-up), and what memory cost (the fastest plan that did not fit).
void explain_winner(const std::vector<AutoCandidate>& all, const AutoPlanOptions& o, const AutoPlanResult& result,
                    bool tie_broken, std::ostringstream& x) {
  const AutoCandidate& w = all.front();
  const double available = static_cast<double>(w.estimate.available_bytes);
  x << "winner: " << w.describe() << "\n  step " << seconds(w.estimate.time.step) << ", MFU "
    << std::round(w.estimate.time.mfu * 1000) / 10 << "%, peak " << gib(static_cast<double>(w.estimate.memory.peak()))
    << " of " << gib(available) << " available\n";
  x << "  " << result.fitting << " of " << result.evaluated << " configurations fit in memory (headroom "
    << o.headroom * 100 << "%); "
    << (!tie_broken     ? "it is the fastest of them"
        : o.allow_mxfp8 ? "it is within 0.1% of the fastest and, of those, carries the fewest collectives in MXFP8, "
                          "then needs the least memory"
                        : "it is within 0.1% of the fastest and needs the least memory of those");
  if (all.size() > 1 && all[1].estimate.fits) {
    const auto& r = all[1];
    const double gain = r.estimate.time.step - w.estimate.time.step;
    x << ".\n  vs runner-up (" << differences(w, r) << "): " << seconds(std::abs(gain))
      << (gain >= 0 ? " faster" : " slower") << " per step, peak " << gib(static_cast<double>(w.estimate.memory.peak()))
      << " vs " << gib(static_cast<double>(r.estimate.memory.peak())) << "; exposed communication "
      << seconds(w.estimate.time.exposed_communication) << " vs " << seconds(r.estimate.time.exposed_communication)
      << ", compute " << seconds(w.estimate.time.compute) << " vs " << seconds(r.estimate.time.compute);
  }
  // The fastest configuration regardless of memory, when it is not the winner: what memory cost us.
  const AutoCandidate* fastest = nullptr;
  for (const auto& c : all) {
    if (!c.estimate.fits && (fastest == nullptr || c.estimate.time.step < fastest->estimate.time.step)) fastest = &c;
  }
  if (fastest != nullptr && fastest->estimate.time.step < w.estimate.time.step) {
    x << ".\n  faster but too big: " << fastest->describe() << " would take " << seconds(fastest->estimate.time.step)
      << " but needs " << gib(static_cast<double>(fastest->estimate.memory.peak()));
  }
  x << ".";
}

// Nothing fits: by how much the smallest configuration misses, and how many chips (or how much memory per
// chip) would make it fit.
void explain_nothing_fits(const spec::ModelSpec& model, const ChipProfile& chip, const AutoPlanOptions& o,
                          const AutoCandidate& first, int64_t world, std::ostringstream& x) {
  const double states_total = static_cast<double>(model.num_params()) *
                              static_cast<double>(4 + 4 + spec::optimizer_state_bytes_per_element(o.base.optimizer));
  const double available = static_cast<double>(first.estimate.available_bytes);
  const auto& m = first.estimate.memory;
  const double peak = static_cast<double>(m.peak());
  x << "nothing fits: the smallest configuration (" << first.describe() << ") needs " << gib(peak) << " per chip, "
    << gib(available) << " available (" << gib(chip.memory_bytes) << " less " << o.headroom * 100
    << "% headroom): short by " << gib(peak - available) << ".\n";
  x << "  model states alone need " << gib(states_total / static_cast<double>(world)) << " per chip ("
    << 4 + 4 + spec::optimizer_state_bytes_per_element(o.base.optimizer) << " bytes x " << model.num_params()
    << " params / " << world << " chips).\n";
  // Transients and activations do not shrink with more chips; model states do.
  const double fixed = peak - static_cast<double>(m.model_states());
  if (fixed < available) {
    const double chips = std::ceil(states_total / (available - fixed));
    const double servers = std::ceil(chips / static_cast<double>(o.chips_per_node));
    x << "  would fit: about " << static_cast<int64_t>(chips) << " chips of " << chip.name << " ("
      << static_cast<int64_t>(servers) << " servers of " << o.chips_per_node << "), or a chip with at least "
      << gib(peak / (1.0 - o.headroom)) << " of memory.";
  } else {
    x << "  even with unlimited chips, one unit's buffers and the activations need " << gib(fixed)
      << " per chip: shorten the sequence or checkpoint more; at " << world << " chips this configuration needs a chip"
      << " with at least " << gib(peak / (1.0 - o.headroom)) << ".";
  }
}

}  // namespace

AutoPlanResult auto_plan(const spec::ModelSpec& model, const ChipProfile& chip, const AutoPlanOptions& o) {
  validate(model);
  validate(chip);
  if (!(o.headroom >= 0 && o.headroom < 1)) throw spec::SpecError("headroom must be in [0, 1)");
  const spec::Mesh full = spec::Mesh::create(spec::MeshSpec{o.nodes, o.chips_per_node, 1, spec::kRestOfWorld});
  const int64_t world = full.world_size();
  const int64_t global_batch = o.global_batch == 0 ? world : o.global_batch;
  if (global_batch < world || global_batch % world != 0) {
    throw spec::SpecError("global batch " + std::to_string(global_batch) +
                          " must be a positive multiple of the world size " + std::to_string(world) +
                          " (every rank trains on the same number of sequences)");
  }
  const int64_t per_rank = global_batch / world;
  std::vector<int64_t> micro_batches;
  for (int64_t mb : divisors(per_rank)) {
    if (mb <= o.max_micro_batch) micro_batches.push_back(mb);
  }

  const int64_t experts = model.dims.moe.num_experts;
  std::vector<int64_t> ep_choices = o.expert_parallel_choices;
  if (ep_choices.empty()) ep_choices = experts > 0 ? divisors(experts) : std::vector<int64_t>{1};

  AutoPlanResult result;
  std::vector<AutoCandidate> all =
      evaluate_candidates(model, chip, o, world, per_rank, micro_batches, ep_choices, result);
  if (all.empty()) {
    std::string tried;
    for (int64_t ep : ep_choices) tried += (tried.empty() ? "" : ", ") + std::to_string(ep);
    throw spec::SpecError("parallelism.expert_parallel_degree: none of " + tried +
                          " divides both a shard degree of the " + std::to_string(world) + " ranks and the " +
                          std::to_string(experts) + " experts of '" + model.name + "'");
  }
  std::sort(all.begin(), all.end(), better);
  const bool tie_broken = break_ties(all);
  for (size_t i = 0; i < all.size() && i < o.top; ++i) {
    if (all[i].estimate.fits != all[0].estimate.fits) break;
    result.top.push_back(all[i]);
  }

  std::ostringstream x;
  const AutoCandidate& first = all.front();
  if (first.estimate.fits) {
    explain_winner(all, o, result, tie_broken, x);
    const auto& w = first;
    result.best = make_plan(model, chip, w.mesh, w.policy, o.headroom);
    result.best->notes.push_back("auto-plan: " + std::to_string(result.fitting) + " of " +
                                 std::to_string(result.evaluated) + " configurations fit; this is the fastest");
  } else {
    explain_nothing_fits(model, chip, o, first, world, x);
  }
  result.explanation = x.str();
  return result;
}

}  // namespace fsdp::sharding
