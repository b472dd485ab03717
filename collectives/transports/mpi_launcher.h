// Whether an MPI launcher started this process: the mpi transport's ranks must come from one. Kept out
// of mpi.h's library so that code built without MPI (fsdp-bench's choice of transport) can ask too.
#pragma once

#include <cstdlib>

namespace fsdp {

// Open MPI's, MPICH's (Hydra) or Slurm's PMI variables.
inline bool started_by_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}

}  // namespace fsdp
