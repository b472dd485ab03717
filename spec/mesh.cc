#include "spec/mesh.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "spec/job_spec.h"
#include "spec/spec_error.h"

namespace fsdp::spec {

std::string_view name(LinkLevel level) { return level == LinkLevel::kIntra ? "intra" : "inter"; }

Mesh Mesh::create(const MeshSpec& s) {
  if (s.nodes <= 0 || s.nodes > kMaxNodes) {
    throw SpecError("mesh: nodes is " + std::to_string(s.nodes) + " (must be 1.." + std::to_string(kMaxNodes) + ")");
  }
  if (s.chips_per_node <= 0 || s.chips_per_node > kMaxChipsPerNode) {
    throw SpecError("mesh: chips per node is " + std::to_string(s.chips_per_node) + " (must be 1.." +
                    std::to_string(kMaxChipsPerNode) + ")");
  }
  for (auto [degree, key] : {std::pair{s.replicate, "replicate"}, std::pair{s.shard, "shard"}}) {
    if (degree < 1 && degree != kRestOfWorld) {
      throw SpecError(std::string("mesh: the ") + key + " degree is " + std::to_string(degree) +
                      " (must be positive, or -1 for the rest of the world)");
    }
  }
  Mesh m;
  m.nodes_ = s.nodes;
  m.chips_per_node_ = s.chips_per_node;
  const auto [r, sh] = resolve_degrees(s.replicate, s.shard, m.world_size());
  m.replicate_ = r;
  m.shard_ = sh;
  return m.with_expert_parallel(s.expert_parallel);
}

Mesh Mesh::with_expert_parallel(int64_t ep) const {
  check_expert_parallel_degree(ep, shard_);
  Mesh m = *this;
  m.expert_parallel_ = ep;
  return m;
}

Mesh Mesh::for_world(int64_t world_size, int64_t replicate, int64_t shard) {
  if (world_size < 1) throw SpecError("mesh: world size " + std::to_string(world_size) + " must be >= 1");
  int64_t per_node = std::min(world_size, kMaxChipsPerNode);
  while (world_size % per_node != 0) --per_node;
  return create(MeshSpec{world_size / per_node, per_node, replicate, shard});
}

int64_t Mesh::nodes_spanned_by_block(int64_t size) const {
  if (size <= 0 || world_size() % size != 0) throw SpecError("mesh: block size must divide the world size");
  // Block j covers ranks [j * size, (j + 1) * size); the pattern repeats every chips_per_node / gcd blocks.
  const int64_t period = chips_per_node_ / std::gcd(size, chips_per_node_);
  const int64_t blocks = std::min(world_size() / size, period);
  int64_t most = 1;
  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t first = j * size;
    const int64_t last = first + size - 1;
    most = std::max(most, node_of(last) - node_of(first) + 1);
  }
  return most;
}

int64_t Mesh::nodes_spanned_by_replicate_group() const {
  if (replicate_ == 1) return 1;
  // Consecutive members are shard_ ranks apart: each on its own server once shard_ >= chips_per_node,
  // otherwise they fill every server from the first member's to the last's.
  if (shard_ >= chips_per_node_) return replicate_;
  return node_of((replicate_ - 1) * shard_) + 1;
}

LinkLevel Mesh::replicate_level() const {
  return nodes_spanned_by_replicate_group() > 1 ? LinkLevel::kInter : LinkLevel::kIntra;
}

}  // namespace fsdp::spec
