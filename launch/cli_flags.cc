#include "launch/cli_flags.h"

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "collectives/types/errors.h"

namespace fsdp::launch {
namespace {

long parse_integer(const std::string& flag, const std::string& text, long lo, long hi) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    throw InvalidArgument(flag + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "], got '" + text + "'");
  }
  return v;
}

}  // namespace

LaunchFlags take_launch_flags(std::vector<std::string>& args) {
  static constexpr std::string_view kFlags[] = {"--rank",        "--world-size",  "--local-rank", "--local-world-size",
                                                "--master-addr", "--master-port", "--transport"};
  LaunchFlags out;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string name = a, value;
    bool has_value = false;
    if (const auto eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    bool known = false;
    for (std::string_view f : kFlags) known = known || name == f;
    if (!known) {
      rest.push_back(a);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) throw InvalidArgument(name + ": missing value");
      value = args[++i];
    }
    constexpr long kMaxRanks = 1 << 24;
    if (name == "--rank") out.overrides.rank = static_cast<int>(parse_integer(name, value, 0, kMaxRanks));
    if (name == "--world-size") out.overrides.world_size = static_cast<int>(parse_integer(name, value, 1, kMaxRanks));
    if (name == "--local-rank") out.overrides.local_rank = static_cast<int>(parse_integer(name, value, 0, kMaxRanks));
    if (name == "--local-world-size") {
      out.overrides.local_world_size = static_cast<int>(parse_integer(name, value, 1, kMaxRanks));
    }
    if (name == "--master-addr") {
      if (value.empty()) throw InvalidArgument("--master-addr: empty address");
      out.overrides.master_addr = value;
    }
    if (name == "--master-port") out.overrides.master_port = static_cast<uint16_t>(parse_integer(name, value, 1, 65535));
    if (name == "--transport") out.transport = value;
  }
  args = std::move(rest);
  return out;
}

std::string launch_flags_usage() {
  return "launch flags (override RANK/WORLD_SIZE/..., OMPI_COMM_WORLD_*, SLURM_* and MASTER_*):\n"
         "  --rank R --world-size N [--local-rank L --local-world-size M]\n"
         "  --master-addr HOST --master-port PORT   where the rendezvous store is (rank 0 serves it)\n"
         "  --transport auto|shm|tcp|ucx|mpi|shm+tcp|shm+ucx\n"
         "                                         default: FSDP_TRANSPORT, else auto (shm on one host, shm+tcp "
         "across:\n"
         "                                         shared memory within each host, TCP between hosts)\n";
}

}  // namespace fsdp::launch
