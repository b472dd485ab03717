// fsdp-mpi-check: one rank of an mpirun job over the MPI transport, no rendezvous store involved.
//
//   mpirun -np 4 fsdp-mpi-check suite      every collective against the reference, with MPI messages of
//                                           at most 40000 bytes, so every large payload travels split
//   mpirun -np 2 fsdp-mpi-check mismatch   size mismatches at the transport, self-sends, reuse after
//   mpirun -np 2 fsdp-mpi-check kill       rank 1 dies after a barrier; rank 0 must name it
//
// Prints "fsdp-mpi-check OK: rank R/N mode M" and exits 0, or says what failed and exits non-zero.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "collectives/transports/mpi.h"
#include "collectives/types/errors.h"
#include "tests/collectives/test_support.h"

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const std::string mode = argc > 1 ? argv[1] : "suite";
  if (mode != "suite" && mode != "mismatch" && mode != "kill") {
    std::fprintf(stderr, "usage: fsdp-mpi-check [suite|mismatch|kill]\n");
    return 2;
  }
  int rank = -1, n = 0, rc = 1;
  try {
    fsdp::MpiOptions options;
    options.max_message_bytes = 40000;
    auto transport = fsdp::make_mpi_transport(-1, -1, 20s, options);
    rank = transport->rank();
    n = transport->size();
    if (mode == "mismatch") {
      rc = transport->size() >= 2 ? fsdp::testing::size_mismatch_scenario(*transport) : 1;
    } else {
      fsdp::CommOptions o;
      o.timeout = 20s;
      o.chunk_bytes = 64 * 1024;
      auto comm = fsdp::Communicator::create(transport, o);
      rc = mode == "suite" ? fsdp::testing::run_collectives_suite(*comm, rank, n)
                           : fsdp::testing::killed_peer_scenario(*comm);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-mpi-check: rank %d FAILED: %s\n", rank, e.what());
    return 1;
  }
  if (rc == 0) {
    std::printf("fsdp-mpi-check OK: rank %d/%d mode %s\n", rank, n, mode.c_str());
  } else {
    std::fprintf(stderr, "fsdp-mpi-check: rank %d/%d mode %s FAILED with %d\n", rank, n, mode.c_str(), rc);
  }
  std::fflush(stdout);
  return rc;
}
