// A batch-invariant matrix product for serving: a row's result never depends on the
// other rows of the batch.
#pragma once

#include "ops/tensor.h"

namespace olmo2::ops {

/// y[M, N] = x[M, K] · w[N, K]ᵀ, as `linear`, but batch-invariant: every element y[m, n]
/// is computed by the same fixed sequence of fp32 operations whatever M and N are,
/// wherever row m sits in x, and whatever the thread count — 16 lanes, lane j
/// accumulating x[m, k]·w[n, k] for k ≡ j (mod 16) in increasing k with fused
/// multiply-adds, the K % 16 tail in the same way, then one fixed reduction tree over
/// the lanes. So a sequence's logits are bit-identical alone or in a busy batch, which
/// OpenBLAS's sgemm does not give (its edge kernels sum in another order: rows differ
/// in the last bits with M). An AVX2+FMA path is chosen at run time where the CPU has
/// it; the portable path does exactly the same operations and gives the same bits.
/// Views: f32 CPU, contiguous last dimension, rows may be strided.
/// Throws ShapeError on mismatched shapes.
/// Source: batch invariance as in He et al., "Defeating Nondeterminism in LLM
/// Inference" (Thinking Machines, 2025).
void linear_batch_invariant(const TensorView& x, const TensorView& w, const TensorView& y);

}  // namespace olmo2::ops
