// The per-row step of token selection (docs/architecture.md §8): each row's most likely
// vocabulary columns, and its max and Σexp for log-probabilities, so that only these few
// numbers (not the whole logits row) leave the device and cross the TP all-gather.
#pragma once

#include <cstdint>

#include "ops/tensor.h"

namespace olmo2::ops {

/// The largest k the CUDA implementation accepts (its block-wide sort of the chosen
/// candidates lives in shared memory). Above it the caller copies the row to the host.
inline constexpr int64_t kMaxDeviceTopCandidates = 256;

/// For each row r of logits [R, V] f32 (stride(1) == 1, stride(0) ≥ V: rows may be
/// padded), over its first `real_cols` columns only (0 ≤ real_cols ≤ V; the rest is
/// vocabulary padding and never chosen):
///   values [R, k] f32, columns [R, k] i32 (contiguous; both empty views for k = 0) ←
///     the k most likely columns, most likely first: the higher value first, the lower
///     column among equal values (−0 equals +0; so k = 1 is argmax's "first among equal
///     maxima", torch.argmax). Each value is the logit's own bits. Slots past real_cols
///     hold (−∞, −1).
///   stats [R, 2] f32, unless an empty view ← (max, Σ_j exp(x_j − max)) over the real
///     columns: max is the most likely column's value; the sum is taken in fp64 (std::exp
///     of the double difference) in column order and rounded once to f32. (−∞, 0) for a
///     row without real columns.
/// NaN logits rank below every number, −∞ included (on every backend alike): one is
/// chosen only when no number is left. R = 0 or k = 0 without stats does
/// nothing. Shapes, dtypes or strides otherwise: ShapeError naming them. On CUDA, k at
/// most kMaxDeviceTopCandidates (ShapeError above); the candidates are bit-identical to
/// the CPU's, the sum is a fixed-order fp64 tree (equal to the CPU's after the f32
/// rounding but in rare last-bit cases).
void top_candidates(const TensorView& logits, int64_t real_cols, const TensorView& values,
                    const TensorView& columns, const TensorView& stats);

/// Shape of a top_candidates call: rows R and candidates k.
struct TopCandidatesShape {
  int64_t rows;
  int64_t k;
};

/// The checks of top_candidates shared by its backends (ShapeError as documented there).
TopCandidatesShape top_candidates_check(const TensorView& logits, int64_t real_cols, const TensorView& values,
                                        const TensorView& columns, const TensorView& stats);

}  // namespace olmo2::ops
