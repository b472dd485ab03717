#include "collectives/core/flight_analysis.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/json.h"

namespace fsdp {
namespace {

FlightEntry::State state_of(const std::string& s, const std::string& where) {
  if (s == "queued") return FlightEntry::State::kQueued;
  if (s == "started") return FlightEntry::State::kStarted;
  if (s == "done") return FlightEntry::State::kDone;
  if (s == "failed") return FlightEntry::State::kFailed;
  throw std::runtime_error(where + ": unknown state '" + s + "'");
}

uint64_t parse_hex(const std::string& s, const std::string& where) {
  try {
    size_t used = 0;
    const uint64_t v = std::stoull(s, &used, 16);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw std::runtime_error(where + ": comm '" + s + "' is not a hex number");
}

// "all_gather seq 17 (4096 bytes, started)".
std::string what(const FlightEntry& e) {
  return std::string(e.op) + " seq " + std::to_string(e.seq) + " (" + std::to_string(e.bytes) + " bytes, " +
         name(e.state) + ")";
}

std::string rank_name(int global, int comm_rank) {
  return "rank " + std::to_string(global) +
         (global != comm_rank ? " (comm rank " + std::to_string(comm_rank) + ")" : "");
}

// One communicator's collectives as each of its members recorded them.
struct CommView {
  int size = 0;
  std::map<int, int> global_of;                            // comm rank -> job-wide rank
  std::map<int, std::map<uint64_t, FlightEntry>> by_rank;  // comm rank -> seq -> entry
};

}  // namespace

FlightDump read_flight_dump(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read flight recorder dump " + path);
  std::stringstream text;
  text << in.rdbuf();
  FlightDump d;
  d.path = path;
  try {
    const json::Value doc = json::parse(text.str());
    d.rank = static_cast<int>(doc.at("rank").integer());
    d.reason = doc.at("reason").string();
    d.wall_time = doc.at("wall_time").number();
    d.monotonic_time = doc.at("monotonic_time").number();
    size_t i = 0;
    for (const json::Value& v : doc.at("entries").array()) {
      const std::string where = "entries[" + std::to_string(i++) + "]";
      FlightEntry e;
      e.rank = static_cast<int>(v.at("rank").integer());
      e.comm = parse_hex(v.at("comm").string(), where);
      e.comm_rank = static_cast<int>(v.at("comm_rank").integer());
      e.comm_size = static_cast<int>(v.at("comm_size").integer());
      const std::string op = v.at("op").string();
      std::snprintf(e.op, sizeof(e.op), "%s", op.c_str());
      e.p2p = v.at("p2p").boolean();
      e.seq = static_cast<uint64_t>(v.at("seq").integer());
      e.bytes = static_cast<size_t>(v.at("bytes").integer());
      e.peer = static_cast<int>(v.at("peer").integer());
      e.state = state_of(v.at("state").string(), where);
      e.queued = v.at("queued").number();
      e.started = v.at("started").number();
      e.finished = v.at("finished").number();
      e.error = v.at("error").string();
      if (e.comm_rank < 0 || e.comm_rank >= e.comm_size) {
        throw std::runtime_error(where + ": comm_rank " + std::to_string(e.comm_rank) + " outside [0, " +
                                 std::to_string(e.comm_size) + ")");
      }
      d.entries.push_back(std::move(e));
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("flight recorder dump " + path + ": " + e.what());
  }
  return d;
}

std::vector<FlightDump> read_flight_dumps(const std::string& dir) {
  std::vector<FlightDump> dumps;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("flight_recorder_rank", 0) == 0 && f.path().extension() == ".json") {
      dumps.push_back(read_flight_dump(f.path().string()));
    }
  }
  if (ec) throw std::runtime_error("cannot list " + dir + ": " + ec.message());
  if (dumps.empty()) throw std::runtime_error("no flight_recorder_rank*.json in " + dir);
  std::sort(dumps.begin(), dumps.end(), [](const FlightDump& a, const FlightDump& b) { return a.rank < b.rank; });
  return dumps;
}

std::vector<FlightFinding> analyze_findings(const std::vector<FlightDump>& dumps) {
  std::map<uint64_t, CommView> comms;
  std::map<int, const FlightEntry*> first_failure;  // job-wide rank -> its first failed entry
  std::map<int, double> dumped_at;                  // job-wide rank -> monotonic time of its dump
  for (const FlightDump& d : dumps) {
    for (const FlightEntry& e : d.entries) {
      dumped_at[e.rank] = d.monotonic_time;
      if (e.state == FlightEntry::State::kFailed && !first_failure.count(e.rank)) first_failure[e.rank] = &e;
      if (e.p2p) continue;  // point-to-point sequence numbers count per peer: nothing to line up
      CommView& c = comms[e.comm];
      c.size = std::max(c.size, e.comm_size);
      c.global_of[e.comm_rank] = e.rank;
      c.by_rank[e.comm_rank][e.seq] = e;
    }
  }

  std::vector<FlightFinding> out;
  for (const auto& [id, c] : comms) {
    const std::string comm = "comm " + comm_id_text(id) + " (" + std::to_string(c.size) + " ranks)";
    // Ranks that left no record of this communicator: dead before dumping, frozen, or never failed.
    std::vector<int> missing;
    for (int r = 0; r < c.size; ++r) {
      if (!c.by_rank.count(r)) missing.push_back(r);
    }
    if (!missing.empty()) {
      std::string list;
      for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
      out.push_back({FlightFinding::Kind::kMissing, -1,
                     comm + ": no record from comm ranks " + list +
                         " (killed, frozen, or still running without a failure to dump)"});
    }

    // Divergence: the same sequence number recorded as different collectives or sizes. Only seqs
    // every recording rank still holds are compared (rings forget their oldest entries).
    uint64_t common_from = 0;
    for (const auto& [r, seqs] : c.by_rank) common_from = std::max(common_from, seqs.begin()->first);
    std::map<uint64_t, std::vector<const FlightEntry*>> at_seq;
    for (const auto& [r, seqs] : c.by_rank) {
      for (auto it = seqs.lower_bound(common_from); it != seqs.end(); ++it) at_seq[it->first].push_back(&it->second);
    }
    for (const auto& [seq, entries] : at_seq) {
      const FlightEntry* a = entries.front();
      auto differs = [a](const FlightEntry* b) {
        const bool sized = parse_collective(a->op) != CollectiveKind::kAllToAllV;  // per-rank sizes differ by design
        return std::string(a->op) != b->op || (sized && a->bytes != b->bytes);
      };
      auto b = std::find_if(entries.begin(), entries.end(), differs);
      if (b == entries.end()) continue;
      out.push_back({FlightFinding::Kind::kDiverged, (*b)->rank,
                     comm + ": diverged at seq " + std::to_string(seq) + ": " + rank_name(a->rank, a->comm_rank) +
                         " ran " + what(*a) + ", " + rank_name((*b)->rank, (*b)->comm_rank) + " ran " + what(**b)});
      break;  // after the first divergence every later seq differs too
    }

    // Behind: a rank whose newest collective is older than the newest any member reached.
    uint64_t newest = 0;
    int newest_rank = -1;
    for (const auto& [r, seqs] : c.by_rank) {
      if (seqs.rbegin()->first >= newest) {
        newest = seqs.rbegin()->first;
        newest_rank = r;
      }
    }
    for (const auto& [r, seqs] : c.by_rank) {
      const FlightEntry& last = seqs.rbegin()->second;
      if (last.seq >= newest) continue;
      const FlightEntry& ahead = c.by_rank.at(newest_rank).rbegin()->second;
      out.push_back({FlightFinding::Kind::kBehind, last.rank,
                     comm + ": " + rank_name(last.rank, r) + " is behind: its newest collective is " + what(last) +
                         " while " + rank_name(ahead.rank, newest_rank) + " reached " + what(ahead)});
    }

    // What each rank was still waiting in when it dumped.
    for (const auto& [r, seqs] : c.by_rank) {
      for (const auto& [seq, e] : seqs) {
        if (e.state != FlightEntry::State::kStarted && e.state != FlightEntry::State::kQueued) continue;
        char age[32];
        std::snprintf(age, sizeof(age), "%.1f s", dumped_at[e.rank] - e.queued);
        out.push_back(
            {FlightFinding::Kind::kInFlight, e.rank,
             comm + ": " + rank_name(e.rank, r) + " was in " + what(e) + ", queued " + age + " before its dump"});
        break;  // the oldest unfinished one is what it waited on
      }
    }
  }
  for (const auto& [rank, e] : first_failure) {
    out.push_back({FlightFinding::Kind::kFailed, rank,
                   "rank " + std::to_string(rank) + " first failed in " + what(*e) + ": " + e->error});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const FlightFinding& a, const FlightFinding& b) { return a.kind < b.kind; });
  return out;
}

std::string analyze(const std::vector<FlightDump>& dumps) {
  std::ostringstream o;
  o << "flight recorder: " << dumps.size() << " dump(s), ranks";
  for (const FlightDump& d : dumps) o << " " << d.rank;
  o << "\n";
  const std::vector<FlightFinding> findings = analyze_findings(dumps);
  if (findings.empty()) o << "no rank behind, diverged, failed or in flight\n";
  for (const FlightFinding& f : findings) o << "- " << f.text << "\n";
  return o.str();
}

}  // namespace fsdp
