// fsdp-flight DIR: reads every rank's flight recorder dump in DIR (flight_recorder_rank*.json,
// written at a rank's first failed collective; docs/errors.md) and prints which rank is behind or
// diverged, at which operation. Exit 0 with a report, 2 when the dumps cannot be read.
#include <cstdio>
#include <cstring>
#include <exception>

#include "collectives/core/flight_analysis.h"

int main(int argc, char** argv) {
  if (argc != 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fprintf(argc == 2 ? stdout : stderr,
                 "usage: fsdp-flight DIR\n"
                 "  DIR holds flight_recorder_rank<R>.json files (FSDP_FLIGHT_RECORDER_DIR; fsdp-train: the job's\n"
                 "  dump folder). Prints, per communicator, the ranks that are behind, diverged, left no record,\n"
                 "  failed, or were still waiting in an operation.\n");
    return argc == 2 ? 0 : 2;
  }
  try {
    std::fputs(fsdp::analyze(fsdp::read_flight_dumps(argv[1])).c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-flight: %s\n", e.what());
    return 2;
  }
}
