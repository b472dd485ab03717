// Bruck all-to-all for small equal blocks: ceil(log2 n) messages per rank instead of n-1, at the
// price of forwarding about half the buffer in every round (log2(n)/2 times the bytes of pairwise).
//
// Rank r first rotates its input so that slot i holds the block for rank r + i. In round k every
// slot whose index has bit k set moves 2^k ranks forward: packed, sent to r + 2^k, and replaced by
// the packed slots received from r - 2^k. A block for rank r + i thus travels i ranks in the rounds
// of i's set bits and arrives in slot i of its destination d, which holds the block from d - i.
#include "collectives/algorithms/algorithms.h"

namespace fsdp {

Task alltoall_bruck(Op& op, const std::byte* in, std::byte* out, size_t block_bytes) {
  const int n = op.size();
  const int r = op.rank();
  std::byte* slots = op.scratch(kScratchWorkIn, block_bytes * n);  // (n, block_bytes), rotated
  std::byte* packed = op.scratch(kScratchGather, block_bytes * ((n + 1) / 2));
  std::byte* incoming = op.scratch(kScratchPartialA, block_bytes * ((n + 1) / 2));
  for (int i = 0; i < n; ++i) copy_bytes(slots + i * block_bytes, in + ((r + i) % n) * block_bytes, block_bytes);
  int round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    size_t moved = 0;
    for (int i = dist; i < n; ++i) {
      if (i & dist) copy_bytes(packed + moved++ * block_bytes, slots + i * block_bytes, block_bytes);
    }
    co_await op.wait(op.recv((r - dist + n) % n, slot(round, 0), incoming, moved * block_bytes),
                     op.send((r + dist) % n, slot(round, 0), packed, moved * block_bytes));
    moved = 0;
    for (int i = dist; i < n; ++i) {
      if (i & dist) copy_bytes(slots + i * block_bytes, incoming + moved++ * block_bytes, block_bytes);
    }
  }
  for (int i = 0; i < n; ++i) copy_bytes(out + ((r - i + n) % n) * block_bytes, slots + i * block_bytes, block_bytes);
}

}  // namespace fsdp
