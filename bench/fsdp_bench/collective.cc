#include "bench/fsdp_bench/collective.h"

namespace fsdp::bench {

std::string_view name(Collective c) {
  switch (c) {
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kSendRecv: return "sendrecv";
    case Collective::kAllToAll: return "alltoall";
  }
  return "?";
}

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> all = {Collective::kAllGather, Collective::kReduceScatter,
                                              Collective::kAllReduce, Collective::kBroadcast,
                                              Collective::kReduce,    Collective::kSendRecv,
                                              Collective::kAllToAll};
  return all;
}

std::optional<Collective> parse_collective(std::string_view s) {
  for (Collective c : all_collectives()) {
    if (name(c) == s) return c;
  }
  return std::nullopt;
}

bool has_reduction(Collective c) {
  return c == Collective::kReduceScatter || c == Collective::kAllReduce || c == Collective::kReduce;
}

bool has_root(Collective c) { return c == Collective::kBroadcast || c == Collective::kReduce; }

bool has_in_place(Collective c) { return c != Collective::kSendRecv && c != Collective::kAllToAll; }

double bus_factor(Collective c, int n) {
  const double part = n > 1 ? static_cast<double>(n - 1) / n : 0.0;
  switch (c) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return part;
    case Collective::kAllReduce: return 2 * part;
    default: return 1.0;
  }
}

Geometry geometry(Collective c, size_t bytes, size_t elem, int n, int rank) {
  Geometry g;
  const size_t count = bytes / elem;
  const size_t block = count / n;
  switch (c) {
    case Collective::kAllGather:
      g.count = block * n;
      g.param_count = block;
      g.send_count = block;
      g.recv_count = block * n;
      g.in_place_offset = block * rank;
      break;
    case Collective::kReduceScatter:
      g.count = block * n;
      g.param_count = block;
      g.send_count = block * n;
      g.recv_count = block;
      g.in_place_offset = block * rank;
      g.in_place_in_recv = false;
      break;
    case Collective::kAllToAll:
      g.count = block * n;
      g.param_count = block;
      g.send_count = g.recv_count = block * n;
      break;
    default:
      g.count = g.param_count = g.send_count = g.recv_count = count;
      break;
  }
  return g;
}

}  // namespace fsdp::bench
