#include "common/fault_injection.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/knobs.h"

namespace fsdp::fault {
namespace {

constexpr std::string_view kWords[] = {"after",         "stop",        "before_vote",  "after_vote",
                                       "in_forward",    "in_backward", "in_optimizer", "in_mirror",
                                       "in_checkpoint", "in_recovery", "in_grow"};
static_assert(std::size(kWords) == static_cast<size_t>(When::kInGrow) + 1, "a word per When, in its order");

struct Entry {
  int64_t step;
  When when;
};

std::mutex g_mutex;
std::vector<Entry> g_entries;  // this rank's, under g_mutex
int g_rank = -1;
std::atomic<int64_t> g_step{0};

std::string usage() {
  std::string words;
  for (std::string_view w : kWords) words += (words.empty() ? "" : "|") + std::string(w);
  return "wants RANK:STEP[:" + words + "][,...], e.g. 1:4 (rank 1 SIGKILLs itself after step 4) or 0:2:in_backward";
}

// "RANK:STEP[:WHEN]" -> rank, step, when; throws naming the whole variable.
void parse_entry(const std::string& one, const std::string& spec, int& rank, Entry& entry) {
  const auto bad = [&]() {
    return std::invalid_argument(std::string(knobs::kFaultKillAfterStep.env) + "='" + spec + "': entry '" + one + "' " +
                                 usage());
  };
  const size_t c1 = one.find(':');
  const size_t c2 = c1 == std::string::npos ? c1 : one.find(':', c1 + 1);
  const std::string r = one.substr(0, c1);
  const std::string s = c1 == std::string::npos ? "" : one.substr(c1 + 1, c2 == std::string::npos ? c2 : c2 - c1 - 1);
  const std::string w = c2 == std::string::npos ? "after" : one.substr(c2 + 1);
  const auto digits = [](const std::string& t) {
    return !t.empty() && t.size() < 10 && t.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!digits(r) || !digits(s) || std::stoll(s) < 1) throw bad();
  rank = std::stoi(r);
  entry.step = std::stoll(s);
  for (size_t i = 0; i < std::size(kWords); ++i) {
    if (w == kWords[i]) {
      entry.when = static_cast<When>(i);
      return;
    }
  }
  throw bad();
}

}  // namespace

namespace detail {

std::atomic<bool> g_armed{false};

void hit(When when, int64_t step) {
  if (!due(when, step)) return;
  if (when == When::kStop) {
    std::fprintf(stderr, "fsdp-train: fault injection: rank %d (pid %d) stops itself (SIGSTOP) after step %lld\n",
                 g_rank, static_cast<int>(::getpid()), static_cast<long long>(step));
    std::fflush(stderr);
    std::raise(SIGSTOP);
    return;
  }
  // When it died, for the recovery benchmark (detect = the survivors' detected_unix minus this).
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::fprintf(stderr, "fsdp-train: fault injection (%s): rank %d SIGKILLs itself in step %lld at unix %.6f\n",
               std::string(name(when)).c_str(), g_rank, static_cast<long long>(step), now);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace detail

std::string_view name(When when) { return kWords[static_cast<size_t>(when)]; }

void arm(int launched_rank) {
  const std::string spec = knobs::kFaultKillAfterStep.get();
  std::vector<Entry> mine;
  size_t begin = 0;
  while (!spec.empty() && begin <= spec.size()) {  // RANK:STEP[:WHEN], comma-separated
    const size_t end = std::min(spec.find(',', begin), spec.size());
    int rank = -1;
    Entry e{};
    parse_entry(spec.substr(begin, end - begin), spec, rank, e);
    if (rank == launched_rank) mine.push_back(e);
    begin = end + 1;
  }
  if (knobs::kRestartCount.get() != 0) mine.clear();  // a restarted job runs undisturbed
  std::lock_guard<std::mutex> lock(g_mutex);
  g_entries = std::move(mine);
  g_rank = launched_rank;
  detail::g_armed.store(!g_entries.empty(), std::memory_order_relaxed);
}

void disarm() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_entries.clear();
  detail::g_armed.store(false, std::memory_order_relaxed);
}

void set_step(int64_t step) { g_step.store(step, std::memory_order_relaxed); }
int64_t current_step() { return g_step.load(std::memory_order_relaxed); }

bool due(When when, int64_t step) {
  if (!armed()) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const Entry& e : g_entries) {
    if (e.step == step && e.when == when) return true;
  }
  return false;
}

}  // namespace fsdp::fault
