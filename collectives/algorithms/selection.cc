#include "collectives/algorithms/selection.h"

#include <optional>
#include <sstream>

#include "collectives/algorithms/algorithms.h"
#include "collectives/types/errors.h"

namespace fsdp {

AlgorithmChoice::AlgorithmChoice(const std::string& spec) {
  std::istringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) throw InvalidArgument("FSDP_ALGO entry '" + item + "' is not collective=algorithm");
    std::string coll = item.substr(0, eq), algo = item.substr(eq + 1);
    const std::optional<CollectiveKind> kind = parse_collective(coll);
    bool known = false;
    std::string choices;
    for (const auto& info : algorithm_registry()) {
      if (!kind || info.collective != *kind) continue;
      choices += " " + std::string(info.name);
      known |= info.name == algo;
    }
    if (!known) {
      throw InvalidArgument("FSDP_ALGO: no algorithm '" + algo + "' for collective '" + coll +
                            "'; choices:" + (choices.empty() ? " (unknown collective)" : choices));
    }
    forced_[*kind] = algo;
  }
}

bool AlgorithmChoice::hierarchical(CollectiveKind collective, size_t bytes, size_t threshold,
                                   bool multi_host) const {
  auto it = forced_.find(collective);
  if (it != forced_.end()) return it->second == "hierarchical";
  return multi_host && bytes >= threshold;
}

bool AlgorithmChoice::small(CollectiveKind collective, size_t bytes, size_t threshold) const {
  auto it = forced_.find(collective);
  if (it == forced_.end()) return bytes < threshold;
  for (const auto& info : algorithm_registry()) {
    if (info.collective == collective && info.name == it->second) return info.small_messages;
  }
  return bytes < threshold;
}

std::string AlgorithmChoice::flat_name(CollectiveKind collective, size_t bytes, size_t threshold) const {
  const bool latency = small(collective, bytes, threshold);
  for (const auto& info : algorithm_registry()) {
    if (info.collective == collective && info.small_messages == latency && info.name != "hierarchical") {
      return std::string(info.name);
    }
  }
  for (const auto& info : algorithm_registry()) {  // one algorithm for every size (all_to_all_v)
    if (info.collective == collective && info.name != "hierarchical") return std::string(info.name);
  }
  throw InvalidArgument("algorithm_for: unknown collective '" + std::string(name(collective)) + "'");
}

}  // namespace fsdp
