#include "spec/mesh.h"

#include <algorithm>
#include <numeric>
#include <string>

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
  if (s.replicate < 0 || s.shard < 0) {
    throw SpecError("mesh: replicate and shard degrees must be positive (got replicate " + std::to_string(s.replicate) +
                    ", shard " + std::to_string(s.shard) + ")");
  }
  Mesh m;
  m.nodes_ = s.nodes;
  m.chips_per_node_ = s.chips_per_node;
  const int64_t world = m.world_size();
  const std::string sizes = "world size " + std::to_string(world) + " (" + std::to_string(s.nodes) + " nodes x " +
                            std::to_string(s.chips_per_node) + " chips)";
  int64_t r = s.replicate;
  int64_t sh = s.shard;
  if (r == 0 && sh == 0) r = 1;
  if (sh == 0) {
    if (world % r != 0) {
      throw SpecError("mesh: replicate degree " + std::to_string(r) + " does not divide the " + sizes +
                      "; pick a divisor of " + std::to_string(world));
    }
    sh = world / r;
  } else if (r == 0) {
    if (world % sh != 0) {
      throw SpecError("mesh: shard degree " + std::to_string(sh) + " does not divide the " + sizes +
                      "; pick a divisor of " + std::to_string(world));
    }
    r = world / sh;
  }
  if (r * sh != world) {
    throw SpecError("mesh: replicate " + std::to_string(r) + " x shard " + std::to_string(sh) + " = " +
                    std::to_string(r * sh) + " is not the " + sizes);
  }
  m.replicate_ = r;
  m.shard_ = sh;
  return m.with_expert_parallel(s.expert_parallel);
}

Mesh Mesh::with_expert_parallel(int64_t ep) const {
  if (ep < 1 || shard_ % ep != 0) {
    throw SpecError("mesh: parallelism.expert_parallel_degree = " + std::to_string(ep) +
                    " must be >= 1 and divide the shard degree " + std::to_string(shard_) +
                    " (the experts' FSDP degree is shard degree / expert_parallel_degree)");
  }
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
