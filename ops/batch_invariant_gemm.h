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
///
/// With a bf16 w [N, K] (x, y f32): y = bf16(x)·wᵀ with fp32 accumulation, each element
/// by this fixed sequence (docs/architecture.md §2, "bf16 products"):
///   x̂ = x rounded to bf16 (nearest even); x̂ and w padded with +0 to K' = 32·⌈K/32⌉
///   acc[0..15] = +0
///   for each pair q = 0 … K'/2 − 1 (elements 2q, 2q+1), lane j = q mod 16:
///     acc[j] = F(x̂[2q+1]·w[2q+1] + acc[j]);  acc[j] = F(x̂[2q]·w[2q] + acc[j])
///   the reduction tree above, each addition F(a + b)
/// where F rounds to nearest even once (an fp32 fma: the product of two bf16 values is
/// exact) and flushes a result below 2⁻¹²⁶ in magnitude to a zero of its sign (FTZ),
/// and subnormal inputs read as zero (DAZ) — VDPBF16PS's per-lane semantics (Intel SDM
/// Vol. 2, VDPBF16PS: two fp32 FMAs, the odd element first, DAZ/FTZ, RNE, MXCSR
/// ignored), which differ from a plain fp32 dot product in the order of each pair and
/// in the flushing. Error: |y − exact| ≤ (K'/16 + 5)·2⁻²⁴·Σ_k|x̂_k·w_k|, up to the
/// flushes (at most 2⁻¹²⁶ per operation). Every code path of ops/bf16_gemm.h computes
/// this sequence (the same bits); InputError when OLMO2_BF16_GEMM names no path or one
/// this CPU lacks.
/// Throws ShapeError on mismatched shapes, another dtype or a strided last dimension.
/// Source: batch invariance as in He et al., "Defeating Nondeterminism in LLM
/// Inference" (Thinking Machines, 2025).
void linear_batch_invariant(const TensorView& x, const TensorView& w, const TensorView& y);

}  // namespace olmo2::ops
