#include "bench/fsdp_bench/targets.h"

namespace fsdp::bench {
namespace {

constexpr size_t kMiB = 1 << 20;

const Measurement* find(const std::vector<Report>& reports, Collective c, size_t bytes, const std::string& backend) {
  for (const Report& r : reports) {
    if (r.options.collective != c) continue;
    for (const Row& row : r.rows) {
      if (row.backend != backend || row.bytes != bytes || row.type != DataType::kFloat32) continue;
      if (row.has_op && row.op != ReduceKind::kSum) continue;
      if (row.out_of_place.ran) return &row.out_of_place;
    }
  }
  return nullptr;
}

}  // namespace

std::vector<Target> standard_targets() {
  std::vector<Target> t;
  for (size_t mib : {16, 64}) {
    const std::string at = " at " + std::to_string(mib) + " MiB";
    t.push_back({Collective::kAllGather, mib * kMiB, "shm", "mpi-native", false, 1.5,
                 "all_gather shm busbw vs MPI_Allgather" + at});
    t.push_back({Collective::kAllGather, mib * kMiB, "shm", "memcpy", false, 0.6,
                 "all_gather shm busbw vs the memcpy bound" + at});
    t.push_back({Collective::kReduceScatter, mib * kMiB, "shm", "mpi-native", false, 3.0,
                 "reduce_scatter shm busbw vs MPI_Reduce_scatter_block" + at});
    t.push_back({Collective::kAllGather, mib * kMiB, "tcp", "gloo", false, 1.5, "all_gather tcp busbw vs Gloo" + at});
    t.push_back({Collective::kReduceScatter, mib * kMiB, "tcp", "gloo", false, 1.5,
                 "reduce_scatter tcp busbw vs Gloo" + at});
  }
  t.push_back({Collective::kAllReduce, 64 * kMiB, "shm", "mpi-native", false, 1.5,
               "all_reduce shm busbw vs MPI_Allreduce at 64 MiB"});
  // Issue 17: the flag path (collectives/flag_path.h) at most Open MPI's time.
  t.push_back({Collective::kAllReduce, 8, "shm", "mpi-native", true, 1.0,
               "8-byte all_reduce shm latency vs MPI_Allreduce"});
  return t;
}

std::vector<Verdict> evaluate(const std::vector<Target>& targets, const std::vector<Report>& reports) {
  std::vector<Verdict> out;
  for (const Target& t : targets) {
    Verdict v{t};
    const Measurement* a = find(reports, t.collective, t.bytes, t.ours);
    const Measurement* b = find(reports, t.collective, t.bytes, t.versus);
    if (a && b) {
      v.measured = true;
      v.ours = t.time_ratio ? a->time_us : a->busbw;
      v.versus = t.time_ratio ? b->time_us : b->busbw;
      v.ratio = v.versus > 0 ? v.ours / v.versus : 0;
      v.met = t.time_ratio ? v.ratio <= t.goal : v.ratio >= t.goal;
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace fsdp::bench
