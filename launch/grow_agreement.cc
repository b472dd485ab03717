#include "launch/grow_agreement.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <thread>

#include "collectives/types/errors.h"

namespace fsdp::launch {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kSlice{10};

std::string entry_key(const std::string& job_prefix, int64_t ticket) {
  return job_prefix + "ft/join/" + std::to_string(ticket);
}

}  // namespace

std::string join_tickets_key(const std::string& job_prefix) { return job_prefix + "ft/join/tickets"; }

void wait_until_replaceable(KeyValueStore& store, const std::string& job_prefix, int launch_rank,
                            const std::function<bool()>& give_up) {
  for (;;) {
    RecoveryDecision d;
    if (current_decision(store, job_prefix, &d) &&
        std::find(d.launch_ranks.begin(), d.launch_ranks.end(), launch_rank) == d.launch_ranks.end()) {
      break;
    }
    if (give_up && give_up()) {
      throw TimeoutError(ErrorContext{launch_rank, -1, "join", 0, 0},
                         "rank " + std::to_string(launch_rank) +
                             " is still a member of the running job (no decision in '" + job_prefix +
                             "ft/current' went on without it): nothing to replace");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  store.erase(exited_key(job_prefix, launch_rank));
}

int64_t post_join(KeyValueStore& store, const std::string& job_prefix, int launch_rank) {
  const int64_t ticket = store.add(join_tickets_key(job_prefix), 1);
  store.set(entry_key(job_prefix, ticket), std::to_string(launch_rank));
  return ticket;
}

int64_t join_tickets(KeyValueStore& store, const std::string& job_prefix) {
  return store.add(join_tickets_key(job_prefix), 0);
}

RecoveryDecision agree_on_grow(KeyValueStore& store, const std::string& job_prefix, int64_t new_epoch,
                               const std::vector<int>& members, int64_t committed_step, int64_t admitted,
                               int64_t last_ticket, std::chrono::milliseconds timeout) {
  RecoveryDecision d;
  d.epoch = new_epoch;
  d.committed_step = committed_step;
  d.launch_ranks = members;
  for (int r = 0; r < static_cast<int>(members.size()); ++r) d.survivors.push_back(r);
  // Each pending ticket's launch rank (-1: no entry in time), newest first: a rank whose earlier
  // newcomer died before admission is represented by its latest one.
  const auto deadline = Clock::now() + timeout;
  std::vector<int> newcomers;
  for (int64_t t = last_ticket; t > admitted; --t) {
    std::optional<std::string> entry = peek(store, entry_key(job_prefix, t));
    while (!entry && Clock::now() < deadline) {
      std::this_thread::sleep_for(kSlice);
      entry = peek(store, entry_key(job_prefix, t));
    }
    int rank = -1;
    if (entry) {
      try {
        rank = std::stoi(*entry);
      } catch (const std::exception&) {
      }
    }
    // Not a member already (its launcher's mistake), not named twice, not known to have exited.
    const auto named = [&](const std::vector<int>& v) { return std::find(v.begin(), v.end(), rank) != v.end(); };
    if (rank < 0 || named(members) || named(newcomers)) continue;
    if (peek(store, exited_key(job_prefix, rank))) continue;
    newcomers.push_back(rank);
  }
  d.launch_ranks.insert(d.launch_ranks.end(), newcomers.rbegin(), newcomers.rend());  // in ticket order
  const std::string key = job_prefix + "ft/epoch" + std::to_string(new_epoch) + "/decision";
  const RecoveryDecision stored = decode_decision(store.compare_set(key, "", encode_decision(d)));
  const std::string admitted_text = "epoch " + std::to_string(new_epoch) + " tickets " + std::to_string(last_ticket);
  for (int64_t t = admitted + 1; t <= last_ticket; ++t) {
    store.compare_set(entry_key(job_prefix, t) + "/admitted", "", admitted_text);
  }
  publish_current(store, job_prefix, stored);
  return stored;
}

bool wait_for_admission(KeyValueStore& store, const std::string& job_prefix, int64_t ticket, Admission* out,
                        const std::function<bool()>& give_up) {
  const std::string key = entry_key(job_prefix, ticket) + "/admitted";
  for (;;) {
    if (const std::optional<std::string> text = peek(store, key)) {
      std::istringstream in(*text);
      std::string w[4];
      for (std::string& word : w) in >> word;
      int64_t epoch = 0;
      try {
        epoch = std::stoll(w[1]);
        out->last_ticket = std::stoll(w[3]);
      } catch (const std::exception&) {
        throw InvalidArgument("not an admission: '" + *text + "' at '" + key + "'");
      }
      out->decision = decode_decision(store.get(job_prefix + "ft/epoch" + std::to_string(epoch) + "/decision"));
      return true;
    }
    if (peek(store, job_prefix + "ft/finished")) return false;
    if (give_up && give_up()) {
      throw TimeoutError(ErrorContext{-1, -1, "join", static_cast<uint64_t>(ticket), 0},
                         "ticket " + std::to_string(ticket) + " was not admitted (waiting on '" + key + "' at " +
                             store.describe() + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void mark_finished(KeyValueStore& store, const std::string& job_prefix) { store.set(job_prefix + "ft/finished", "1"); }

}  // namespace fsdp::launch
