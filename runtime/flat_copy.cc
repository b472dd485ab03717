#include "runtime/flat_copy.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "collectives/quantized.h"
#include "collectives/kernels/reduce_kernels.h"

namespace fsdp::runtime {
namespace {

// Calls fn(flat_offset, offset in the parameter, count) for every run of parameter p's real rows: one
// per rank holding some.
template <class Fn>
void for_each_run_of(const spec::UnitShardLayout& layout, size_t p, Fn&& fn) {
  const auto& pl = layout.params()[p];
  for (int64_t r = 0; r < layout.shard_degree(); ++r) {
    const spec::RowRange rows = pl.rows_of(r);
    if (rows.size() == 0) continue;
    fn(layout.flat_offset(p, r), rows.begin * pl.row_numel, rows.size() * pl.row_numel);
  }
}

// Calls fn(flat_offset, param_offset, count) for every run of real rows: one per (parameter, rank).
template <class Fn>
void for_each_run(const spec::UnitShardLayout& layout, Fn&& fn) {
  const auto offsets = param_major_offsets(layout);
  for (size_t p = 0; p < layout.params().size(); ++p) {
    for_each_run_of(layout, p, [&](int64_t flat_at, int64_t at, int64_t n) { fn(flat_at, offsets[p] + at, n); });
  }
}

// dst (dst_type) = src (src_type), or dst += src (in f32, rounded once to dst_type), n elements.
void convert_run(void* dst, DataType dst_type, const void* src, DataType src_type, size_t n, bool add) {
  if (n == 0) return;
  if (!add && dst_type == src_type) {
    std::memcpy(dst, src, n * element_size(dst_type));
    return;
  }
  if (dst_type == DataType::kFloat32) {
    auto* out = static_cast<float*>(dst);
    add ? accumulate_widened(out, src, n, src_type) : widen_to_f32(out, src, n, src_type, 1.0);
    return;
  }
  if (!add && src_type == DataType::kFloat32) {
    narrow_from_f32(dst, static_cast<const float*>(src), n, dst_type);
    return;
  }
  // Widened a block at a time on the stack: no allocation on the step's path.
  constexpr size_t kBlock = 2048;
  float wide[kBlock], have[kBlock];
  auto* out = static_cast<std::byte*>(dst);
  const auto* in = static_cast<const std::byte*>(src);
  const size_t out_elem = element_size(dst_type), in_elem = element_size(src_type);
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t m = std::min(kBlock, n - at);
    widen_to_f32(wide, in + at * in_elem, m, src_type, 1.0);
    if (add) {
      widen_to_f32(have, out + at * out_elem, m, dst_type, 1.0);
      reduce_into(wide, have, m, DataType::kFloat32, ReduceKind::kSum);
    }
    narrow_from_f32(out + at * out_elem, wide, m, dst_type);
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

std::vector<GatherRun> gather_runs(const spec::UnitShardLayout& layout, DataType type) {
  const auto offsets = param_major_offsets(layout);
  const auto elem = static_cast<int64_t>(element_size(type));
  std::vector<GatherRun> runs;
  for (size_t p = 0; p < layout.params().size(); ++p) {
    const spec::ParamShardLayout& pl = layout.params()[p];
    runs.push_back(GatherRun{.src = static_cast<size_t>(pl.offset_in_chunk * elem),
                             .dst = static_cast<size_t>(offsets[p] * elem),
                             .per_rank = static_cast<size_t>(pl.shard_numel() * elem),
                             .total = static_cast<size_t>(pl.numel() * elem)});
  }
  return runs;
}

void copy_out(const spec::UnitShardLayout& layout, const void* flat, DataType type, void* params,
              DataType params_type) {
  const auto* bytes = static_cast<const std::byte*>(flat);
  auto* out = static_cast<std::byte*>(params);
  const size_t elem = element_size(type), out_elem = element_size(params_type);
  for_each_run(layout, [&](int64_t flat_at, int64_t param_at, int64_t n) {
    convert_run(out + param_at * out_elem, params_type, bytes + flat_at * elem, type, static_cast<size_t>(n), false);
  });
}

void copy_out_mxfp8(const spec::UnitShardLayout& layout, const uint8_t* wire, DataType element, DataType param_type,
                    void* params, DataType params_type) {
  const auto chunk = static_cast<size_t>(layout.chunk_numel());
  auto* out = static_cast<std::byte*>(params);
  const size_t out_elem = element_size(params_type);
  for_each_run(layout, [&](int64_t flat_at, int64_t param_at, int64_t n) {
    mx::decode_gathered(wire, chunk, static_cast<size_t>(flat_at), static_cast<size_t>(n), element,
                        out + param_at * out_elem, params_type, param_type);
  });
}

void copy_in(const spec::UnitShardLayout& layout, const float* params, void* flat, DataType type) {
  auto* bytes = static_cast<std::byte*>(flat);
  const size_t elem = element_size(type);
  for_each_run(layout, [&](int64_t flat_at, int64_t param_at, int64_t n) {
    narrow_from_f32(bytes + flat_at * elem, params + param_at, static_cast<size_t>(n), type);
  });
}

void write_param_grad(const spec::UnitShardLayout& layout, size_t param, const void* grad, DataType grad_type,
                      void* flat, DataType type, bool add) {
  auto* bytes = static_cast<std::byte*>(flat);
  const auto* in = static_cast<const std::byte*>(grad);
  const size_t elem = element_size(type), in_elem = element_size(grad_type);
  for_each_run_of(layout, param, [&](int64_t flat_at, int64_t at, int64_t n) {
    convert_run(bytes + flat_at * elem, type, in + at * in_elem, grad_type, static_cast<size_t>(n), add);
  });
}

void zero_param_rows(const spec::UnitShardLayout& layout, size_t param, void* flat, DataType type) {
  auto* bytes = static_cast<std::byte*>(flat);
  const size_t elem = element_size(type);
  for_each_run_of(layout, param, [&](int64_t flat_at, int64_t, int64_t n) {
    std::memset(bytes + flat_at * elem, 0, static_cast<size_t>(n) * elem);
  });
}

void zero_padding(const spec::UnitShardLayout& layout, void* flat, DataType type) {
  auto* bytes = static_cast<std::byte*>(flat);
  const size_t elem = element_size(type);
  for (size_t p = 0; p < layout.params().size(); ++p) {
    const auto& pl = layout.params()[p];
    for (int64_t r = 0; r < layout.shard_degree(); ++r) {
      const int64_t real = pl.rows_of(r).size() * pl.row_numel;
      const int64_t pad = pl.shard_numel() - real;
      if (pad > 0) std::memset(bytes + (layout.flat_offset(p, r) + real) * elem, 0, static_cast<size_t>(pad) * elem);
    }
  }
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
