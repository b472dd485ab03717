// The memory fit of a configuration: the planner's estimate of one rank's peak (sharding/planner.h,
// the one memory model) for this job, against the job's memory (job_memory_capacity), before anything
// is allocated.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "sharding/planner.h"
#include "spec/checked_size.h"
#include "train/config.h"

namespace fsdp::train {

MemoryLimit job_memory_capacity(const sharding::ChipProfile& chip) {
  if (chip.name != "cpu") return {static_cast<int64_t>(chip.memory_bytes), "chip profile '" + chip.name + "'"};
  return host_memory_limit();
}

namespace {

// What drives a share of the peak, and the keys that set it.
enum class Term { kBlocks, kVocab, kTokens };

struct Share {
  Term term;
  double bytes;
};

// The peak's shares by term, from the plan's own numbers: its model states split over the units by
// their shard elements (every weight is fp32), the blocks' to kBlocks and the embedding's and head's
// to kVocab with the head's saved logits; the rest of its activations (the blocks', the residual
// stream, the largest scratch) to kTokens.
std::vector<Share> shares(const sharding::Plan& plan) {
  double block_elements = 0, all_elements = 0, head_activations = 0;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const auto& unit = plan.rank_model.units[i];
    const auto chunk = static_cast<double>(plan.units[i].chunk_numel());
    all_elements += chunk;
    if (unit.is_layer || unit.experts) {
      block_elements += chunk;
    } else {
      head_activations += static_cast<double>(plan.schedule.units[i].memory.activations);
    }
  }
  const auto& m = plan.estimate.memory;
  const double blocks = static_cast<double>(m.model_states()) * block_elements / std::max(all_elements, 1.0);
  const double vocab = static_cast<double>(m.model_states()) - blocks + head_activations;
  const double tokens = std::max(0.0, static_cast<double>(m.activations) - head_activations);
  return {{Term::kBlocks, blocks}, {Term::kVocab, vocab}, {Term::kTokens, tokens}};
}

// A size that overflowed: the term of the field that drives it (spec::SizeOverflow::driver).
Term term_of(const std::string& driver) {
  if (driver == "vocab") return Term::kVocab;
  if (driver == "seq_len" || driver == "micro_batch" || driver == "grad_accum") return Term::kTokens;
  return Term::kBlocks;
}

// The refusal: the term's keys (after the file line of the first of them given), the bytes needed and
// this job's memory.
[[noreturn]] void refuse(const TrainConfig& c, const spec::ModelDims& m, Term term, const std::string& needs,
                         const MemoryLimit& capacity) {
  const TrainingConfig& t = c.training;
  std::string keys;
  std::vector<const char*> set_by;  // the keys whose line names the term, in order
  switch (term) {
    case Term::kBlocks:
      keys = "model.dim = " + std::to_string(m.dim) + " with model.n_layers = " + std::to_string(m.layers);
      set_by = {"model.dim", "model.n_layers", "model.flavor"};
      break;
    case Term::kVocab:
      keys = "model.vocab_size = " + std::to_string(m.vocab) + " with model.dim = " + std::to_string(m.dim);
      set_by = {"model.vocab_size", "model.dim", "model.flavor"};
      break;
    case Term::kTokens:
      keys = "training.seq_len = " + std::to_string(t.seq_len) +
             " with training.local_batch_size = " + std::to_string(t.local_batch_size);
      set_by = {"training.seq_len", "training.local_batch_size"};
      break;
  }
  std::string where;  // the first of the keys given decides: a file's line, or none for a flag
  for (const char* key : set_by) {
    if (c.key_lines.count(key) != 0) {
      where = c.where_set(key);
      break;
    }
  }
  const bool from_flavor = !c.model.dim && term != Term::kTokens;
  char text[120];
  std::snprintf(text, sizeof(text), ", more than this host's %.3g bytes of memory (",
                static_cast<double>(capacity.bytes));
  throw ConfigError(where + keys + (from_flavor ? " (model.flavor = '" + c.model.flavor + "')" : "") + needs + text +
                    capacity.source + ")");
}

}  // namespace

void TrainConfig::check_fits_machine_memory() const {
  const sharding::ChipProfile chip = sharding::chip_preset("cpu");
  const MemoryLimit capacity = job_memory_capacity(chip);
  if (capacity.bytes <= 0) return;
  const spec::ModelDims dims = model_dims();
  sharding::Plan plan;
  try {
    const spec::ModelSpec model = spec::make_llama(model_name(), dims);
    plan = sharding::make_plan(model, chip, mesh().with_expert_parallel(parallelism.expert_parallel_degree), policy(),
                               0.0);
  } catch (const spec::SizeOverflow& e) {
    char needs[80];
    std::snprintf(needs, sizeof(needs), " needs more than %.3g bytes per rank (",
                  static_cast<double>(std::numeric_limits<int64_t>::max()));
    refuse(*this, dims, term_of(e.driver()),
           (e.counted() ? needs : std::string(" cannot be planned (")) + e.what() + ")", capacity);
  } catch (const spec::SpecError&) {
    return;  // a model or policy that cannot be built: the key checks name it (model_problems)
  }
  const int64_t peak = plan.estimate.memory.peak();
  if (peak <= capacity.bytes) return;
  const auto all = shares(plan);
  const Share largest = *std::max_element(all.begin(), all.end(), [](auto& a, auto& b) { return a.bytes < b.bytes; });
  char needs[160];
  std::snprintf(needs, sizeof(needs),
                " needs at least %.3g bytes per rank (the planner's peak; %.3g of them from these keys)",
                static_cast<double>(peak), largest.bytes);
  refuse(*this, dims, largest.term, needs, capacity);
}

}  // namespace fsdp::train
