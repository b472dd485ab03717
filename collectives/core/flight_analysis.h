// Reading the flight recorder dumps of every rank (collectives/core/flight_recorder.h) and saying
// what went wrong: per communicator, which ranks are behind (their newest collective is older than
// the others'), which ranks left no record, where the ranks diverged (the same sequence number, a
// different collective or size), what was still in flight, and each rank's first failure.
// `fsdp-flight DIR` prints analyze(read_flight_dumps(DIR)).
#pragma once

#include <string>
#include <vector>

#include "collectives/core/flight_recorder.h"

namespace fsdp {

struct FlightDump {
  std::string path;
  int rank = -1;
  std::string reason;
  double wall_time = 0, monotonic_time = 0;
  std::vector<FlightEntry> entries;
};

// Throws std::runtime_error naming the file and the field on a malformed dump.
FlightDump read_flight_dump(const std::string& path);
// Every flight_recorder_rank*.json in dir, by rank; throws when there is none.
std::vector<FlightDump> read_flight_dumps(const std::string& dir);

struct FlightFinding {
  enum class Kind { kDiverged, kBehind, kMissing, kFailed, kInFlight };  // the report's order
  Kind kind;
  int rank = -1;  // job-wide rank it is about (-1: several)
  std::string text;
};

std::vector<FlightFinding> analyze_findings(const std::vector<FlightDump>& dumps);
// The findings as a report, most telling first (diverged, behind, missing, failed, in flight).
std::string analyze(const std::vector<FlightDump>& dumps);

}  // namespace fsdp
