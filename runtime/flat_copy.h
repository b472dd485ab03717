// Moves values between the two layouts a unit's parameters live in (sharding/shard_layout.h):
//   param-major: every parameter whole and contiguous, one after the other (what the model computes on);
//   rank-major:  the all-gather / reduce-scatter flat buffer, rank 0's chunk, rank 1's chunk, ...
// and between fp32 and the policy's param / reduce dtypes on the way. FSDP2 calls these copy-out
// (flat -> params after the all-gather) and copy-in (grads -> flat before the reduce-scatter).
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/types/gather_run.h"
#include "common/dtype.h"
#include "spec/shard_layout.h"

namespace fsdp::runtime {

// Element offset of each parameter in the param-major buffer (prefix sums of numel).
std::vector<int64_t> param_major_offsets(const spec::UnitShardLayout& layout);

// flat (rank-major, `type`) -> params (param-major, `params_type`: fp32, or `type` for a plain copy of
// the runs). Padding is skipped.
void copy_out(const spec::UnitShardLayout& layout, const void* flat, DataType type, void* params,
              DataType params_type = DataType::kFloat32);
// copy_out as an all-gather's runs (collectives/types/gather_run.h): each parameter is one run, rank r's
// rows at offset_in_chunk of r's chunk, landing param-major in `type` with no conversion. An all-gather
// into these writes the parameters in its own pass, with no rank-major buffer to copy out of.
std::vector<GatherRun> gather_runs(const spec::UnitShardLayout& layout, DataType type);
// The MXFP8 all-gather's slots (collectives/quantized.h: rank r's chunk of the flat layout, encoded)
// -> params (param-major, `params_type`: fp32 or param_type), each value rounded to param_type (kFloat32 or
// kBfloat16): what a param_type all-gather and copy_out give, decoded in the same pass as the copy, with no
// param_type flat buffer.
void copy_out_mxfp8(const spec::UnitShardLayout& layout, const uint8_t* wire, DataType element, DataType param_type,
                    void* params, DataType params_type = DataType::kFloat32);
// params (param-major, fp32) -> flat (rank-major, `type`), rounding once. Padding is left as it is
// (zero in a freshly allocated buffer).
void copy_in(const spec::UnitShardLayout& layout, const float* params, void* flat, DataType type);

// Parameter `param`'s full gradient (row-major, `grad_type`) -> its rows of every rank's chunk of flat
// (rank-major, `type`), converted; `add`: added to what is there (in f32, rounded once to `type`). The
// PyTorch front end's copy-in, one parameter at a time as autograd hands the gradients over. Padding
// is not touched.
void write_param_grad(const spec::UnitShardLayout& layout, size_t param, const void* grad, DataType grad_type,
                      void* flat, DataType type, bool add);
// Zeroes parameter `param`'s rows of the flat buffer (a gradient that never came) / every padding
// element (rows past a parameter's end in each rank's shard of it).
void zero_param_rows(const spec::UnitShardLayout& layout, size_t param, void* flat, DataType type);
void zero_padding(const spec::UnitShardLayout& layout, void* flat, DataType type);

// One rank's chunk of the flat layout <-> that rank's rows of the param-major buffer, in fp32. Used to
// initialise master shards from full parameters and by tests.
void extract_chunk(const spec::UnitShardLayout& layout, int64_t rank, const float* params, float* chunk);

// dst[i] += float(src[i]) for src in `type`.
void accumulate_widened(float* dst, const void* src, size_t count, DataType type);

}  // namespace fsdp::runtime
