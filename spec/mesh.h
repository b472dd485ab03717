// The device mesh: nodes (servers) x chips per node, viewed as replicate x shard (HSDP). Ranks are
// numbered node-major (rank = node * chips_per_node + local chip) and the shard dimension is innermost:
// rank = replica * shard_degree + shard_rank, as torch's init_device_mesh(("replicate", "shard")) does.
// So a shard group is a run of consecutive ranks and stays inside one server when it fits.
#pragma once

#include <cstdint>
#include <string_view>

namespace fsdp::spec {

inline constexpr int64_t kMaxChipsPerNode = 144;
inline constexpr int64_t kMaxNodes = 65536;
// A replicate or shard degree that takes the rest of the world (TorchTitan's -1 for
// parallelism.data_parallel_*_degree): world size / the other degree.
inline constexpr int64_t kRestOfWorld = -1;

// Which link a group's collective is bound by: the server's chip-to-chip fabric, or the network.
enum class LinkLevel { kIntra, kInter };
std::string_view name(LinkLevel level);

struct MeshSpec {
  int64_t nodes = 1;
  int64_t chips_per_node = 1;
  int64_t replicate = 1;         // kRestOfWorld: world / shard
  int64_t shard = kRestOfWorld;  // kRestOfWorld: world / replicate
  // Expert parallelism (sharding/expert_parallel.h): runs of this many consecutive shard ranks split a
  // MoE model's experts; each expert is FSDP-sharded over the shard / expert_parallel ranks holding it
  // (shard ranks equal mod expert_parallel). 1: none. Must divide the shard degree.
  int64_t expert_parallel = 1;
};

class Mesh {
 public:
  // Throws SpecError for non-positive sizes, more than kMaxChipsPerNode per node, or degrees whose
  // product is not the world size.
  static Mesh create(const MeshSpec& spec);
  // The mesh of a job of `world_size` ranks: replicate x shard, kRestOfWorld taking the rest. Servers
  // are as large as the planner allows (the largest divisor of the world up to kMaxChipsPerNode), which
  // matters only for the link-level predictions of a plan. Throws SpecError like create().
  static Mesh for_world(int64_t world_size, int64_t replicate, int64_t shard = kRestOfWorld);

  int64_t nodes() const { return nodes_; }
  int64_t chips_per_node() const { return chips_per_node_; }
  int64_t world_size() const { return nodes_ * chips_per_node_; }
  int64_t replicate_degree() const { return replicate_; }
  int64_t shard_degree() const { return shard_; }
  int64_t expert_parallel_degree() const { return expert_parallel_; }
  int64_t expert_shard_degree() const { return shard_ / expert_parallel_; }  // an expert's FSDP group
  // The same mesh with another expert-parallel degree (validated as create() does).
  Mesh with_expert_parallel(int64_t ep) const;

  int64_t shard_rank(int64_t rank) const { return rank % shard_; }
  int64_t replica_index(int64_t rank) const { return rank / shard_; }
  int64_t node_of(int64_t rank) const { return rank / chips_per_node_; }
  // The rank's place among the data-parallel ranks, which read distinct batches: replicas and shard
  // ranks alike (the shard dimension is innermost, so it is the rank itself in a pure DP mesh).
  int64_t data_parallel_rank(int64_t rank) const { return replica_index(rank) * shard_ + shard_rank(rank); }
  int64_t data_parallel_size() const { return replicate_ * shard_; }

  // Most servers any group of `size` consecutive ranks (aligned to multiples of size) spans.
  int64_t nodes_spanned_by_block(int64_t size) const;
  // Servers spanned by a replicate group (ranks s, s + shard, s + 2 * shard, ...).
  int64_t nodes_spanned_by_replicate_group() const;

  LinkLevel shard_level() const { return level_of_block(shard_); }
  LinkLevel replicate_level() const;
  LinkLevel level_of_block(int64_t size) const {
    return nodes_spanned_by_block(size) > 1 ? LinkLevel::kInter : LinkLevel::kIntra;
  }
  // The EP group: expert_parallel consecutive ranks.
  LinkLevel expert_parallel_level() const { return level_of_block(expert_parallel_); }
  // An expert's FSDP group: shard ranks s, s + ep, s + 2 ep, ... of one shard group. It spans servers
  // whenever the shard group does and it has two members or more.
  LinkLevel expert_shard_level() const { return expert_shard_degree() > 1 ? shard_level() : LinkLevel::kIntra; }

 private:
  int64_t nodes_ = 1;
  int64_t chips_per_node_ = 1;
  int64_t replicate_ = 1;
  int64_t shard_ = 1;
  int64_t expert_parallel_ = 1;
};

}  // namespace fsdp::spec
