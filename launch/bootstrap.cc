#include "launch/bootstrap.h"

#include <cstdlib>
#include <limits>

#include "collectives/types/errors.h"
#include "common/knobs.h"

namespace fsdp::launch {
namespace {

std::optional<std::string> real_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

int64_t parse_int(const std::string& var, const std::string& text, int64_t lo, int64_t hi) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo || v > hi) {
    throw InvalidArgument(var + "='" + text + "' is not an integer in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
  }
  return v;
}

// One launcher's variable names for rank, world size, local rank and local size.
struct Scheme {
  const char* source;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

constexpr Scheme kSchemes[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

constexpr int64_t kMaxRanks = std::numeric_limits<int>::max();

}  // namespace

ProcessEnv detect_process_env(const BootstrapOverrides& o, const EnvReader& reader) {
  const EnvReader env = reader ? reader : EnvReader(real_env);
  ProcessEnv p;
  p.source = "single";
  for (const Scheme& s : kSchemes) {
    const auto rank = env(s.rank);
    const auto world = env(s.world);
    if (!rank && !world) continue;
    if (!rank || !world) {
      throw InvalidArgument(std::string(s.source) + " environment is half set: " + (rank ? s.rank : s.world) +
                            " without " + (rank ? s.world : s.rank));
    }
    p.source = s.source;
    p.rank = static_cast<int>(parse_int(s.rank, *rank, 0, kMaxRanks));
    p.world_size = static_cast<int>(parse_int(s.world, *world, 1, kMaxRanks));
    const auto local_rank = env(s.local_rank);
    const auto local_world = env(s.local_world);
    // Without local information every rank counts as its own host: correct, if slower.
    p.local_rank = local_rank ? static_cast<int>(parse_int(s.local_rank, *local_rank, 0, kMaxRanks)) : 0;
    if (local_world) {
      // Slurm writes SLURM_NTASKS_PER_NODE as "4" or "4(x2)" for uneven layouts; the count comes first.
      const std::string count = local_world->substr(0, local_world->find('('));
      p.local_world_size = static_cast<int>(parse_int(s.local_world, count, 1, kMaxRanks));
    } else {
      p.local_world_size = 1;
    }
    break;
  }

  if (auto v = env("MASTER_ADDR")) p.master_addr = *v;
  if (auto v = env(std::string(knobs::kMasterAddr.env)); v && !v->empty()) p.master_addr = *v;
  if (auto v = env("MASTER_PORT")) p.master_port = static_cast<uint16_t>(parse_int("MASTER_PORT", *v, 1, 65535));
  if (auto v = env(std::string(knobs::kMasterPort.env)); v && !v->empty()) {
    p.master_port = static_cast<uint16_t>(knobs::kMasterPort.parse(*v));
  }

  const bool overridden = o.rank || o.world_size || o.local_rank || o.local_world_size;
  if (o.rank) p.rank = *o.rank;
  if (o.world_size) p.world_size = *o.world_size;
  if (o.local_rank) p.local_rank = *o.local_rank;
  if (o.local_world_size) p.local_world_size = *o.local_world_size;
  if (o.master_addr) p.master_addr = *o.master_addr;
  if (o.master_port) p.master_port = *o.master_port;
  if (overridden) p.source = "override";

  const std::string from = " (from " + p.source + ")";
  if (p.world_size < 1) throw InvalidArgument("world size " + std::to_string(p.world_size) + " must be >= 1" + from);
  if (p.rank < 0 || p.rank >= p.world_size) {
    throw InvalidArgument("rank " + std::to_string(p.rank) + " is outside [0, " + std::to_string(p.world_size) + ")" +
                          from);
  }
  if (p.local_world_size < 1 || p.local_world_size > p.world_size) {
    throw InvalidArgument("local world size " + std::to_string(p.local_world_size) + " must be in [1, " +
                          std::to_string(p.world_size) + "]" + from);
  }
  if (p.local_rank < 0 || p.local_rank >= p.local_world_size) {
    throw InvalidArgument("local rank " + std::to_string(p.local_rank) + " is outside [0, " +
                          std::to_string(p.local_world_size) + ")" + from);
  }
  return p;
}

bool environment_names_rank_zero(const EnvReader& env) {
  try {
    return detect_process_env({}, env).rank == 0;
  } catch (const std::exception&) {
    return true;
  }
}

}  // namespace fsdp::launch
