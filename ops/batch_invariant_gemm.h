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
/// in the last bits with M). With an f32 w, one of three code paths computes it, all
/// with exactly these operations and so the same bits: avx512 (one zmm per element),
/// avx2 (two ymm per element) or portable (std::fmaf) — batch_invariant_path() below;
/// InputError when OLMO2_BATCH_INVARIANT_GEMM names no path or one this CPU lacks.
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

/// A code path of linear_batch_invariant with an f32 w (docs/architecture.md §2,
/// "Batch-invariant products"). Every path gives the same bits.
enum class BatchInvariantPath {
  Avx512,    ///< 512-bit fmas, one zmm of 16 lanes per element (cpuid avx512f, avx512bw,
             ///< avx512dq, avx512vl)
  Avx2,      ///< 256-bit fmas, two ymm per element (cpuid avx2, fma)
  Portable,  ///< scalar std::fmaf, any CPU
};

/// The path's name as OLMO2_BATCH_INVARIANT_GEMM spells it: "avx512", "avx2", "portable".
const char* batch_invariant_path_name(BatchInvariantPath path);

/// Whether this CPU can run `path` (cpuid, read once). Portable: always.
bool batch_invariant_path_available(BatchInvariantPath path);

/// The path linear_batch_invariant takes now with an f32 w: the one set by
/// set_batch_invariant_path, else the one the environment variable
/// OLMO2_BATCH_INVARIANT_GEMM names (avx512|avx2|portable, read once, at the first
/// call), else the fastest this CPU has (avx512, then avx2, then portable). Throws
/// InputError naming the value when OLMO2_BATCH_INVARIANT_GEMM names no path or one this
/// CPU lacks (and again at every later call). (A bf16 w takes the bf16 paths of
/// ops/bf16_gemm.h, chosen by OLMO2_BF16_GEMM.)
BatchInvariantPath batch_invariant_path();

/// The name of batch_invariant_path(), for start-up logs and benchmark output.
const char* batch_invariant_path_name();

/// Forces `path` for every later f32 linear_batch_invariant, process-wide (for tests and
/// benchmarks; not to be changed while a product runs on another thread). Throws
/// ShapeError when this CPU lacks it.
void set_batch_invariant_path(BatchInvariantPath path);

/// Undoes set_batch_invariant_path: back to OLMO2_BATCH_INVARIANT_GEMM or the detected path.
void reset_batch_invariant_path();

}  // namespace olmo2::ops
