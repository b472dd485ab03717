// Ring reduce-scatter. At step s rank r sends its partial sum of block (r - s - 1) to the right and
// receives the left's partial of block (r - s - 2), adding its own input; after n - 1 steps it holds
// block r reduced over all ranks. Chunks are received, reduced while still in cache, and forwarded
// one by one, so the ring pipelines.
//
// Partials alternate between two scratch buffers: a receive lands where an earlier partial was sent
// from, so it first waits for the last send that read that chunk of that buffer. (Not simply "the
// previous step's send": with more ranks than elements some blocks are empty and skip their sends.)
#include <algorithm>
#include <cstring>
#include <utility>

#include "collectives/algorithms/algorithms.h"
#include "collectives/kernels/reduce_kernels.h"

namespace fsdp {

Task reduce_scatter_ring(Op& op, const std::byte* in, std::byte* out, Blocks blocks, Reduction red) {
  const int n = op.size();
  const int r = op.rank();
  if (n == 1) {
    if (out != in + blocks.offset(r)) copy_bytes(out, in + blocks.offset(r), blocks.bytes(r));
    co_return;
  }
  if (blocks.total_bytes() == 0) co_return;
  const int right = (r + 1) % n;
  const int left = (r - 1 + n) % n;
  const size_t elem = red.elem();
  const Chunking chunks(op.chunk_bytes(), blocks.max_bytes(), elem);
  auto block_at = [&](int s) { return ((r - s - 1) % n + n) % n; };  // the block sent at step s

  // In place, the last step cannot receive into `out`: it still holds this rank's own input.
  const bool out_aliases_in = overlaps(out, blocks.bytes(r), in, blocks.total_bytes());
  std::byte* partial[2] = {op.scratch(kScratchPartialA, blocks.max_bytes()),
                           n > 2 ? op.scratch(kScratchPartialB, blocks.max_bytes()) : nullptr};
  auto dst = [&](int s) { return (s == n - 2 && !out_aliases_in) ? out : partial[s % 2]; };
  RequestList recvs_next = op.request_list();  // receives posted for the coming step, by chunk

  // reading[k][c]: the last send from chunk c of partial[k]; a receive into that chunk waits for it.
  const size_t max_chunks = chunks.count(blocks.max_bytes());
  RequestList reading[2] = {RequestList(max_chunks, &op.arena()), RequestList(max_chunks, &op.arena())};
  // The send a receive of step s, chunk c must wait for first (null: none).
  auto hazard = [&](int s, size_t c) { return dst(s) != out ? std::exchange(reading[s % 2][c], nullptr) : nullptr; };
  auto post_recv = [&](int s, size_t c) {
    recvs_next[c] = op.recv(left, slot(s, c), dst(s) + c * chunks.size, chunks.length(blocks.bytes(block_at(s + 1)), c));
  };

  RequestList all_sends = op.request_list();
  const int b0 = block_at(0);
  for (size_t c = 0; c < chunks.count(blocks.bytes(b0)); ++c) {
    all_sends.push_back(op.send(right, slot(0, c), in + blocks.offset(b0) + c * chunks.size,
                                chunks.length(blocks.bytes(b0), c)));
  }
  recvs_next.resize(chunks.count(blocks.bytes(block_at(1))));
  for (size_t c = 0; c < recvs_next.size(); ++c) {
    if (RequestPtr h = hazard(0, c)) co_await op.wait(std::move(h));
    post_recv(0, c);
  }

  for (int s = 0; s < n - 1; ++s) {
    const bool last = s == n - 2;
    const int b = block_at(s + 1);  // the block arriving now; forwarded at step s + 1
    RequestList recvs = std::exchange(recvs_next, op.request_list());
    const size_t next_chunks = last ? 0 : chunks.count(blocks.bytes(block_at(s + 2)));
    recvs_next.resize(next_chunks);
    for (size_t c = 0; c < std::max(recvs.size(), next_chunks); ++c) {
      if (c < recvs.size()) {
        co_await op.wait(recvs[c]);
        const size_t len = chunks.length(blocks.bytes(b), c);
        std::byte* partial_chunk = dst(s) + c * chunks.size;
        const std::byte* mine = in + blocks.offset(b) + c * chunks.size;
        if (last && out_aliases_in) {
          reduce_pair(out + c * chunks.size, partial_chunk, mine, len / elem, red.type, red.kind);
        } else {
          reduce_into(partial_chunk, mine, len / elem, red.type, red.kind);
        }
        if (!last) {
          all_sends.push_back(op.send(right, slot(s + 1, c), partial_chunk, len));
          reading[s % 2][c] = all_sends.back();
        }
      }
      // Post the next step's receive of this chunk right away, so the left neighbour can pipeline.
      if (c < next_chunks) {
        if (RequestPtr h = hazard(s + 1, c)) co_await op.wait(std::move(h));
        post_recv(s + 1, c);
      }
    }
  }
  co_await op.wait(std::move(all_sends));
}

}  // namespace fsdp
