#include "runtime/flat_copy.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "collectives/quantized.h"
#include "collectives/kernels/reduce_kernels.h"

namespace fsdp::runtime {
namespace {

// Calls fn(flat_offset, param_offset, count) for every run of real rows: one per (parameter, rank).
template <class Fn>
void for_each_run(const spec::UnitShardLayout& layout, Fn&& fn) {
  const auto offsets = param_major_offsets(layout);
  const auto& params = layout.params();
  for (size_t p = 0; p < params.size(); ++p) {
    const auto& pl = params[p];
    for (int64_t r = 0; r < layout.shard_degree(); ++r) {
      const spec::RowRange rows = pl.rows_of(r);
      if (rows.size() == 0) continue;
      fn(layout.flat_offset(p, r), offsets[p] + rows.begin * pl.row_numel, rows.size() * pl.row_numel);
    }
  }
}

}  // namespace

std::vector<int64_t> param_major_offsets(const spec::UnitShardLayout& layout) {
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const auto& p : layout.params()) {
    offsets.push_back(at);
    at += p.numel();
  }
  return offsets;
}

void copy_out(const spec::UnitShardLayout& layout, const void* flat, DataType type, float* params) {
  const auto* bytes = static_cast<const std::byte*>(flat);
  const size_t elem = element_size(type);
  for_each_run(layout, [&](int64_t flat_at, int64_t param_at, int64_t n) {
    widen_to_f32(params + param_at, bytes + flat_at * elem, static_cast<size_t>(n), type, 1.0);
  });
}

void copy_out_mxfp8(const spec::UnitShardLayout& layout, const uint8_t* wire, DataType element, DataType param_type,
                    float* params) {
  const auto chunk = static_cast<size_t>(layout.chunk_numel());
  for_each_run(layout, [&](int64_t flat_at, int64_t param_at, int64_t n) {
    mx::decode_gathered(wire, chunk, static_cast<size_t>(flat_at), static_cast<size_t>(n), element, params + param_at,
                        DataType::kFloat32, param_type);
  });
}

void copy_in(const spec::UnitShardLayout& layout, const float* params, void* flat, DataType type) {
  auto* bytes = static_cast<std::byte*>(flat);
  const size_t elem = element_size(type);
  for_each_run(layout, [&](int64_t flat_at, int64_t param_at, int64_t n) {
    narrow_from_f32(bytes + flat_at * elem, params + param_at, static_cast<size_t>(n), type);
  });
}

void extract_chunk(const spec::UnitShardLayout& layout, int64_t rank, const float* params, float* chunk) {
  const auto offsets = param_major_offsets(layout);
  const auto& ps = layout.params();
  for (size_t p = 0; p < ps.size(); ++p) {
    const spec::RowRange rows = ps[p].rows_of(rank);
    if (rows.size() == 0) continue;
    std::memcpy(chunk + ps[p].offset_in_chunk, params + offsets[p] + rows.begin * ps[p].row_numel,
                static_cast<size_t>(rows.size() * ps[p].row_numel) * sizeof(float));
  }
}

void accumulate_widened(float* dst, const void* src, size_t count, DataType type) {
  if (count == 0) return;
  if (type == DataType::kFloat32) {
    reduce_into(dst, src, count, DataType::kFloat32, ReduceKind::kSum);
    return;
  }
  // Widened a block at a time on the stack: no allocation on the step's path.
  constexpr size_t kBlock = 2048;
  float wide[kBlock];
  const auto* bytes = static_cast<const std::byte*>(src);
  for (size_t at = 0; at < count; at += kBlock) {
    const size_t n = std::min(kBlock, count - at);
    widen_to_f32(wide, bytes + at * element_size(type), n, type, 1.0);
    reduce_into(dst + at, wide, n, DataType::kFloat32, ReduceKind::kSum);
  }
}

}  // namespace fsdp::runtime
