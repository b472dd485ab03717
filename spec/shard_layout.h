// Pure sharding math, FSDP2 style: the layout the runtime allocates and the planner prices.
//
// Each parameter is sharded on dim 0 over the shard group of N ranks. Its rows are padded up to a
// multiple of N (padded_rows) and split evenly: rank r holds rows [r * rows_per_rank, (r + 1) *
// rows_per_rank), of which only those below `rows` are real; the rest are zero padding. A parameter
// with fewer rows than ranks leaves the last ranks with padding only.
//
// A unit (one FSDP group, e.g. a transformer block) all-gathers through ONE flat buffer that is
// rank-major: rank 0's chunk, then rank 1's chunk, ... Every rank's chunk holds its shard of every
// parameter of the unit, in the unit's parameter order, each shard starting at offset_in_chunk and
// taking rows_per_rank * row_numel elements. All chunks have the same size (chunk_numel), so one
// equal-count all-gather (each rank contributes its chunk) fills the buffer, and one equal-count
// reduce-scatter of the full-gradient buffer in the same layout leaves each rank its gradient shard.
// Sizes and offsets are in elements of whatever dtype the buffer holds (param dtype for all-gather,
// reduce dtype for reduce-scatter); no alignment padding is inserted between parameters.
//
//   element (row i, column j) of parameter p lives in the flat buffer at
//     owner = i / rows_per_rank                       (the rank that holds it)
//     owner * chunk_numel + offset_in_chunk + (i % rows_per_rank) * row_numel + j
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/model_spec.h"

namespace fsdp::spec {

struct RowRange {
  int64_t begin = 0;  // first row, inclusive
  int64_t end = 0;    // one past the last real row; end == begin for a padding-only shard
  int64_t size() const { return end - begin; }
};

struct ParamShardLayout {
  int64_t rows = 0;             // dim 0 of the parameter (1 for a scalar)
  int64_t row_numel = 0;        // elements per row
  int64_t rows_per_rank = 0;    // ceil(rows / shard_degree)
  int64_t padded_rows = 0;      // rows_per_rank * shard_degree
  int64_t offset_in_chunk = 0;  // start of this parameter's shard inside every rank's chunk

  int64_t numel() const { return rows * row_numel; }
  int64_t shard_numel() const { return rows_per_rank * row_numel; }  // including padding
  RowRange rows_of(int64_t rank) const;                              // real rows rank holds
  int64_t owner_of_row(int64_t row) const { return row / rows_per_rank; }
  int64_t ranks_with_rows() const;  // ranks holding at least one real row
};

class UnitShardLayout {
 public:
  // Throws SpecError when shard_degree < 1.
  UnitShardLayout(const UnitSpec& unit, int64_t shard_degree);

  int64_t shard_degree() const { return shard_degree_; }
  int64_t chunk_numel() const { return chunk_numel_; }                 // per rank, padded
  int64_t flat_numel() const { return chunk_numel_ * shard_degree_; }  // the all-gather buffer
  int64_t numel() const { return numel_; }                             // unpadded
  int64_t padding_numel() const { return flat_numel() - numel_; }
  const std::vector<ParamShardLayout>& params() const { return params_; }

  // Where rank r's shard of parameter p starts in the flat buffer.
  int64_t flat_offset(size_t param, int64_t rank) const;
  // Where element `index` (row-major in the parameter's full shape) of parameter p lives in the flat buffer.
  int64_t flat_index(size_t param, int64_t index) const;
  // Which rank owns that element.
  int64_t owner(size_t param, int64_t index) const;

 private:
  int64_t shard_degree_ = 1;
  int64_t chunk_numel_ = 0;
  int64_t numel_ = 0;
  std::vector<ParamShardLayout> params_;
};

// All units of a model sharded over `shard_degree` ranks.
std::vector<UnitShardLayout> shard_model(const ModelSpec& model, int64_t shard_degree);

}  // namespace fsdp::spec
