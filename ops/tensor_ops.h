// The ops between the model's kernels: copies, fills, row gathers and scatters, rounding
// to a dtype, scaling and reductions. Model, training and serving code moves and reduces
// tensors only through these (never by memcpy or loops over raw floats), so that every
// backend runs them on its own device (docs/architecture.md §2).
#pragma once

#include <cstdint>

#include "ops/tensor.h"

namespace olmo2::ops {

/// dst ← src, element by element, for views of the same shape (any rank, any strides).
/// The dtypes may be equal (any dtype: a bit copy) or convert between floating types:
/// f32 → bf16 (rounded to nearest even), bf16 → f32 (exact), f16 → f32 or bf16 (f16 is
/// a load-only type). The devices may differ (a host ↔ device transfer).
/// src and dst must not overlap. Throws ShapeError on mismatched shapes or dtypes.
void copy(const TensorView& src, const TensorView& dst);

/// Every element of dst ← value (converted to dst's dtype). Any rank and strides.
void fill(const TensorView& dst, double value);

/// dst[i, :] ← src[index[i], :]. src [R, W], index [n] i32 (each in [0, R): ShapeError
/// naming the index otherwise), dst [n, W]; same dtype; contiguous rows.
void gather_rows(const TensorView& src, const TensorView& index, const TensorView& dst);

/// dst[index[i], :] ← src[i, :] (the inverse of gather_rows: writing new keys and values
/// into KV-cache rows). src [n, W], index [n] i32 in [0, R) and distinct (a repeated
/// index is a ShapeError naming both places, on every backend: on a GPU it would be a
/// race), dst [R, W].
void scatter_rows(const TensorView& src, const TensorView& index, const TensorView& dst);

/// Rounds every element of an f32 view in place to the nearest value of `dtype` (bf16:
/// nearest even, as torch's .to(torch.bfloat16); f32: nothing). Lets fp32 kernels
/// reproduce a reference that stores activations in bf16. ShapeError for another dtype.
void round_to(const TensorView& x, DType dtype);

/// x ← x · factor, in place (f32).
void scale(const TensorView& x, float factor);

/// start + Σ x² over every element of a contiguous f32 view, in fp64: the elements are
/// taken in fixed chunks of 2^14, each chunk summed in order, the chunk sums added to
/// `start` in order — so the result does not depend on the thread count.
double sum_squares(const TensorView& x, double start = 0.0);

/// Σ over the rows of x [T, W] f32 of the row's L2 norm, each row's squares summed in
/// fp64 in order (the per-layer activation norms training reports).
double sum_row_norms(const TensorView& x);

}  // namespace olmo2::ops
