// Element-wise kernels the reduction algorithms run between transfers. They take only "native"
// types (those equal to their accumulate_type: f32, f64 and the integers); 16- and 8-bit floats are
// widened to f32 first with widen_to_f32 and narrowed once at the end with narrow_from_f32.
// Integer arithmetic wraps (two's complement), never undefined behaviour.
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "collectives/types/reduce_op.h"

namespace fsdp {

// dst[i] = dst[i] (op) src[i]; op is kSum, kProd, kMax or kMin. dst and src do not overlap.
void reduce_into(void* dst, const void* src, size_t count, DataType t, ReduceKind op);

// dst[i] = a[i] (op) b[i]; dst may alias a or b exactly.
void reduce_pair(void* dst, const void* a, const void* b, size_t count, DataType t, ReduceKind op);

// buf[i] = buf[i] * scalar in t's arithmetic (ints multiply by the scalar cast to t, wrapping).
void scale_in_place(void* buf, size_t count, DataType t, double scalar);

// dst[i] = src[i] * scalar, as scale_in_place but out of place.
void scale_copy(void* dst, const void* src, size_t count, DataType t, double scalar);

// buf[i] = buf[i] / divisor in t's arithmetic: f32 divides in f32, f64 in f64, ints truncate.
void divide_in_place(void* buf, size_t count, DataType t, int divisor);

// dst[i] = float(src[i]) * scalar for any t (scalar 1.0 is a plain widening; f64 narrows to f32).
void widen_to_f32(float* dst, const void* src, size_t count, DataType t, double scalar);

// dst[i] = t(src[i]) rounded once, for t a 16- or 8-bit float (or f32, a copy).
void narrow_from_f32(void* dst, const float* src, size_t count, DataType t);

}  // namespace fsdp
