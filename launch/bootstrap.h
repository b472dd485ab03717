// Who am I in the job: rank, world size, local rank and size, and where the rendezvous lives, read
// from whatever started the process. Sources, in order of precedence:
//
//   1. explicit overrides (the API, or a CLI flag such as --rank);
//   2. torchrun style: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
//   3. Open MPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
//   4. Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE;
//   5. none of them: a single process, rank 0 of 1.
//
// torchrun beats mpirun and Slurm because it sets its variables explicitly for this process, while
// the others may merely be inherited from an enclosing allocation; mpirun beats Slurm because inside
// an allocation SLURM_PROCID numbers mpirun's daemons, not the ranks. MASTER_ADDR / MASTER_PORT
// (or FSDP_MASTER_ADDR / FSDP_MASTER_PORT, which win) name the rendezvous store under any source.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace fsdp::launch {

struct ProcessEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // empty when nothing named one
  uint16_t master_port = 0;
  std::string source;  // "override", "torchrun", "mpirun", "slurm" or "single"
};

// Values set by the API or the command line; each replaces what the environment said.
struct BootstrapOverrides {
  std::optional<int> rank, world_size, local_rank, local_world_size;
  std::optional<std::string> master_addr;
  std::optional<uint16_t> master_port;
};

// Reads one environment variable; nullopt when unset. Tests pass a map instead of the real environment.
using EnvReader = std::function<std::optional<std::string>(const std::string&)>;

// Throws fsdp::InvalidArgument naming the variables when they are malformed, half set (RANK without
// WORLD_SIZE), or inconsistent (a rank outside the world, a local rank outside the local world).
ProcessEnv detect_process_env(const BootstrapOverrides& overrides = {}, const EnvReader& env = {});

// Whether the environment makes this process rank 0 (or names no rank): for start-up lines said once per
// job. Malformed variables count as rank 0; detect_process_env reports them when the job reads them.
bool environment_names_rank_zero(const EnvReader& env = {});

}  // namespace fsdp::launch
