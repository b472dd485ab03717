#include "launch/failure_agreement.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <sstream>
#include <thread>

#include "collectives/types/errors.h"

namespace fsdp::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kSlice{10};

bool parse_int64(const std::string& text, int64_t* value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end && !text.empty();
}

std::string join(const std::vector<int>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

bool parse_list(const std::string& text, std::vector<int>* out) {
  out->clear();
  if (text == "-") return true;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    int64_t v = 0;
    if (!parse_int64(item, &v) || v < 0 || v > INT32_MAX) return false;
    out->push_back(static_cast<int>(v));
  }
  return !out->empty();
}

// Old rank -> launch rank: the decision that made the old world, else (epoch 1) the identity.
std::vector<int> launch_ranks_of(KeyValueStore& store, const std::string& job_prefix, int64_t new_epoch, int old_size) {
  std::vector<int> launch(static_cast<size_t>(old_size));
  for (int r = 0; r < old_size; ++r) launch[static_cast<size_t>(r)] = r;
  if (new_epoch <= 1) return launch;
  const std::string key = job_prefix + "ft/epoch" + std::to_string(new_epoch - 1) + "/decision";
  const std::optional<std::string> previous = peek(store, key);
  if (!previous) return launch;
  const RecoveryDecision d = decode_decision(*previous);
  if (static_cast<int>(d.launch_ranks.size()) != old_size) {
    throw InvalidArgument("agree_on_failure: a world of " + std::to_string(old_size) + " ranks, but '" + key +
                          "' made one of " + std::to_string(d.launch_ranks.size()) + " (" + *previous + ")");
  }
  return d.launch_ranks;
}

}  // namespace

std::string exited_key(const std::string& job_prefix, int launch_rank) {
  return job_prefix + "ft/exited/" + std::to_string(launch_rank);
}

std::optional<std::string> peek(KeyValueStore& store, const std::string& key) {
  try {
    return store.get(key, milliseconds(0));
  } catch (const TimeoutError&) {
    return std::nullopt;
  }
}

std::string encode_decision(const RecoveryDecision& d) {
  return "epoch " + std::to_string(d.epoch) + " step " + std::to_string(d.committed_step) + " survivors " +
         join(d.survivors) + " launch " + join(d.launch_ranks);
}

RecoveryDecision decode_decision(const std::string& text) {
  std::istringstream in(text);
  std::string w[8];
  for (std::string& word : w) in >> word;
  RecoveryDecision d;
  std::string rest;
  const bool ok = w[0] == "epoch" && parse_int64(w[1], &d.epoch) && w[2] == "step" &&
                  parse_int64(w[3], &d.committed_step) && w[4] == "survivors" && parse_list(w[5], &d.survivors) &&
                  w[6] == "launch" && parse_list(w[7], &d.launch_ranks) && !(in >> rest) &&
                  d.survivors.size() <= d.launch_ranks.size();
  if (!ok) {
    throw InvalidArgument("not a recovery decision: '" + text.substr(0, 200) +
                          "' (expected 'epoch E step S survivors a,b,.. launch x,y,..')");
  }
  return d;
}

// ft/current only moves forward: a slow survivor of an earlier epoch never overwrites a later decision.
void publish_current(KeyValueStore& store, const std::string& job_prefix, const RecoveryDecision& d) {
  const std::string key = job_prefix + "ft/current";
  const std::string text = encode_decision(d);
  for (;;) {
    const std::optional<std::string> current = peek(store, key);
    if (current && decode_decision(*current).epoch >= d.epoch) return;
    if (store.compare_set(key, current.value_or(""), text) == text) return;
  }
}

bool current_decision(KeyValueStore& store, const std::string& job_prefix, RecoveryDecision* out) {
  const std::optional<std::string> text = peek(store, job_prefix + "ft/current");
  if (!text) return false;
  *out = decode_decision(*text);
  return true;
}

RecoveryDecision agree_on_failure(KeyValueStore& store, const std::string& job_prefix, int64_t new_epoch, int old_rank,
                                  int old_size, int64_t committed_step,
                                  const std::function<std::vector<int>()>& known_lost, milliseconds timeout) {
  if (new_epoch < 1 || old_size < 1 || old_rank < 0 || old_rank >= old_size) {
    throw InvalidArgument("agree_on_failure: rank " + std::to_string(old_rank) + " of " + std::to_string(old_size) +
                          " at epoch " + std::to_string(new_epoch) + " (epochs from 1, ranks 0..size-1)");
  }
  const std::string epoch_prefix = job_prefix + "ft/epoch" + std::to_string(new_epoch) + "/";
  const std::string decision_key = epoch_prefix + "decision";
  const std::vector<int> launch = launch_ranks_of(store, job_prefix, new_epoch, old_size);
  store.set(epoch_prefix + "alive/" + std::to_string(old_rank), std::to_string(committed_step));

  std::vector<std::optional<int64_t>> posted(static_cast<size_t>(old_size));  // each posted rank's step
  std::vector<char> gone(static_cast<size_t>(old_size), 0);                   // known lost, or exited
  posted[static_cast<size_t>(old_rank)] = committed_step;
  const auto deadline = Clock::now() + timeout;
  std::optional<std::string> stored = peek(store, decision_key);
  while (!stored) {
    if (known_lost) {
      for (int r : known_lost()) {
        if (r >= 0 && r < old_size && r != old_rank) gone[static_cast<size_t>(r)] = 1;
      }
    }
    bool settled = true;
    for (int r = 0; r < old_size; ++r) {
      const auto i = static_cast<size_t>(r);
      if (!posted[i]) {
        int64_t step = 0;
        const std::optional<std::string> value = peek(store, epoch_prefix + "alive/" + std::to_string(r));
        if (value && parse_int64(*value, &step)) posted[i] = step;
      }
      if (!posted[i] && !gone[i] && peek(store, exited_key(job_prefix, launch[i]))) gone[i] = 1;
      settled = settled && (posted[i] || gone[i]);
    }
    if (settled || Clock::now() >= deadline) {
      RecoveryDecision d;
      d.epoch = new_epoch;
      for (int r = 0; r < old_size; ++r) {
        const auto i = static_cast<size_t>(r);
        if (!posted[i] || gone[i]) continue;
        // It posted, then died (during recovery): the launcher said so meanwhile.
        if (r != old_rank && peek(store, exited_key(job_prefix, launch[i]))) continue;
        d.survivors.push_back(r);
        d.launch_ranks.push_back(launch[i]);
        d.committed_step = std::max(d.committed_step, *posted[i]);
      }
      stored = store.compare_set(decision_key, "", encode_decision(d));
      break;
    }
    try {
      stored = store.get(decision_key, kSlice);  // the slice's pause, cut short by a decision
    } catch (const TimeoutError&) {
    }
  }
  const RecoveryDecision d = decode_decision(*stored);
  if (std::find(d.survivors.begin(), d.survivors.end(), old_rank) == d.survivors.end()) {
    throw Fenced("rank " + std::to_string(old_rank) + " was declared lost at epoch " + std::to_string(new_epoch) +
                 " (the survivors went on without it): exiting [launch rank " +
                 std::to_string(launch[static_cast<size_t>(old_rank)]) + "; decision " + encode_decision(d) + "]");
  }
  publish_current(store, job_prefix, d);
  return d;
}

}  // namespace fsdp::launch
