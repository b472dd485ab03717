// Communicator::shrink (the survivors of a lost peer, without asking it anything) and lost_peer.
//
// A shrink is a split whose membership every survivor computes alone from the excluded set, so it
// exchanges nothing: no rank, dead or alive, is waited on. The child is a rank-mapped view over the
// parent's transport, like a split's; transports fail per peer (a lost process fails only the requests
// with it), and the child's tag context is its own, so nothing of the parent's (a dead peer's leftovers,
// operations the parent aborted) is ever matched by the child.
#include <algorithm>

#include "collectives/communicator_impl.h"
#include "common/splitmix.h"

namespace fsdp {

std::vector<int> shrink_survivors(int size, int self, std::span<const int> excluded) {
  const std::string where = "shrink on rank " + std::to_string(self) + " of " + std::to_string(size) + ": ";
  std::vector<bool> out(static_cast<size_t>(size), false);
  for (size_t i = 0; i < excluded.size(); ++i) {
    const int r = excluded[i];
    const std::string entry = "excluded rank " + std::to_string(r) + " (entry " + std::to_string(i) + ")";
    if (r < 0 || r >= size) throw InvalidArgument(where + entry + " is outside [0, " + std::to_string(size) + ")");
    if (out[static_cast<size_t>(r)]) throw InvalidArgument(where + entry + " is listed twice");
    out[static_cast<size_t>(r)] = true;
  }
  if (excluded.size() == static_cast<size_t>(size)) throw InvalidArgument(where + "every rank is excluded");
  if (out[static_cast<size_t>(self)]) {
    throw InvalidArgument(where + "the calling rank is excluded: excluded ranks must not call shrink");
  }
  std::vector<int> survivors;
  for (int r = 0; r < size; ++r) {
    if (!out[static_cast<size_t>(r)]) survivors.push_back(r);
  }
  return survivors;
}

std::unique_ptr<Communicator> Communicator::shrink(std::span<const int> excluded) {
  const std::vector<int> members = shrink_survivors(size(), rank(), excluded);
  // The context: the parent's, this shrink's number and the excluded set, identical on every survivor
  // without any exchange (the parent's sequence numbers may differ after a failure: a rank that saw the
  // peer die through ncclCommGetAsyncError posted fewer operations than one whose collective failed).
  uint64_t context = splitmix64(impl_->group.context ^ splitmix64(++impl_->shrinks) ^ 0x5348524eull);  // "SHRN"
  std::vector<int> sorted(excluded.begin(), excluded.end());
  std::sort(sorted.begin(), sorted.end());
  for (int r : sorted) context = splitmix64(context ^ static_cast<uint64_t>(r));
  context &= ~kPointToPointBit;
  for (int r : sorted) impl_->transport->retire_peer(impl_->group.endpoints[static_cast<size_t>(r)]);
  std::vector<int> endpoints;
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    endpoints.push_back(impl_->group.endpoints[static_cast<size_t>(members[i])]);
    if (members[i] == rank()) new_rank = static_cast<int>(i);
  }
  std::unique_ptr<Communicator> child(
      new Communicator(impl_->transport, options_, impl_->engine, context, std::move(endpoints), new_rank));
  if (impl_->layout) child->impl_->layout = std::make_shared<const HostLayout>(impl_->layout->subset(members));
  return child;
}

std::optional<Communicator::LostPeer> Communicator::lost_peer() {
  auto [index, why] = impl_->engine->find_lost(*impl_->transport, impl_->group.endpoints);
  if (index < 0) return std::nullopt;
  // As a failed operation would: teardown then aborts instead of waiting on the lost peer (World::shutdown).
  impl_->transport->note_failure(why);
  return LostPeer{index, std::move(why)};
}

}  // namespace fsdp
