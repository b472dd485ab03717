#include "spec/shard_layout.h"

#include <algorithm>
#include <string>

#include "spec/checked_size.h"
#include "spec/spec_error.h"

namespace fsdp::spec {

RowRange ParamShardLayout::rows_of(int64_t rank) const {
  const int64_t begin = std::min(rows, rank * rows_per_rank);
  const int64_t end = std::min(rows, (rank + 1) * rows_per_rank);
  return RowRange{begin, end};
}

int64_t ParamShardLayout::ranks_with_rows() const { return (rows + rows_per_rank - 1) / rows_per_rank; }

UnitShardLayout::UnitShardLayout(const UnitSpec& unit, int64_t shard_degree) : shard_degree_(shard_degree) {
  if (shard_degree < 1) throw SpecError("shard degree must be >= 1 (got " + std::to_string(shard_degree) + ")");
  params_.reserve(unit.params.size());
  for (const auto& spec : unit.params) {
    ParamShardLayout p;
    p.rows = spec.rows();
    p.row_numel = spec.row_numel();
    if (p.rows <= 0 || p.row_numel <= 0) {
      throw SpecError("parameter '" + spec.name + "' of unit '" + unit.name + "' has an empty or negative shape");
    }
    // Sizes of a validated model fit int64 unpadded; padding to a huge shard degree may not.
    const char* what = "a unit's shard elements padded to the shard degree";
    p.rows_per_rank = p.rows / shard_degree + (p.rows % shard_degree != 0 ? 1 : 0);
    p.padded_rows = checked_mul(p.rows_per_rank, shard_degree, what, "shard_degree");
    p.offset_in_chunk = chunk_numel_;
    chunk_numel_ = checked_add(chunk_numel_, checked_mul(p.rows_per_rank, p.row_numel, what, "shard_degree"), what,
                               "shard_degree");
    numel_ = checked_add(numel_, checked_mul(p.rows, p.row_numel, what, "shard_degree"), what, "shard_degree");
    params_.push_back(p);
  }
  checked_mul(chunk_numel_, shard_degree, "a unit's flat buffer (chunk x shard degree)", "shard_degree");
}

int64_t UnitShardLayout::flat_offset(size_t param, int64_t rank) const {
  return rank * chunk_numel_ + params_.at(param).offset_in_chunk;
}

int64_t UnitShardLayout::owner(size_t param, int64_t index) const {
  const auto& p = params_.at(param);
  return p.owner_of_row(index / p.row_numel);
}

int64_t UnitShardLayout::flat_index(size_t param, int64_t index) const {
  const auto& p = params_.at(param);
  const int64_t row = index / p.row_numel;
  const int64_t col = index % p.row_numel;
  const int64_t rank = p.owner_of_row(row);
  return rank * chunk_numel_ + p.offset_in_chunk + (row % p.rows_per_rank) * p.row_numel + col;
}

std::vector<UnitShardLayout> shard_model(const ModelSpec& model, int64_t shard_degree) {
  std::vector<UnitShardLayout> units;
  units.reserve(model.units.size());
  for (const auto& u : model.units) units.emplace_back(u, shard_degree);
  return units;
}

}  // namespace fsdp::spec
