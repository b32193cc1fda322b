// Backward (gradient) kernels of the OLMo 2 forward ops, CPU, f32 — plus the fused
// cross-entropy + z-loss forward/backward of the training loss (docs/architecture.md §7).
//
// Conventions shared by every function here:
//  - float views are f32 with a contiguous last dimension (rows may be strided), except
//    the weights of linear_backward and the rmsnorm backward, which may be bf16; token
//    ids, positions and targets are i32 views; all views of one call on one device;
//  - activation gradients (dx, dq, dgate, …) are OVERWRITTEN unless a flag says otherwise;
//  - parameter gradients (dw, dtable) are ACCUMULATED (+=) by default, because gradients
//    sum over micro-batches; zero them once per optimizer step;
//  - a contract violation (shape, dtype, device) throws ShapeError; a bad token id or
//    target throws InputError naming it.
// The math of each backward is the derivative of the forward declared in the matching
// header (gemm.h, embedding.h, rmsnorm.h, rope.h, attention.h, elementwise.h), computed
// in fp32 (the f32 activation path; the bf16 rounding of the forwards is not modelled).
#pragma once

#include <cstdint>

#include "ops/rope.h"
#include "ops/tensor.h"

namespace olmo2::ops {

/// Backward of `linear` (y = x·wᵀ): x [M, K], w [N, K], dy [M, N].
///   dx [M, K]  = dy · w          (overwritten, or added to when accumulate_dx)
///   dw [N, K] += dyᵀ · x         (accumulated when accumulate_dw, else overwritten)
/// Either output may be an empty view (TensorView{}) to skip it (e.g. no dx for the first
/// layer's input). x, dy, dx, dw are f32; w is f32 or bf16 (a bf16 w is widened to f32
/// exactly, in panels; dy is not rounded; dw stays f32, it does not read w). Uses
/// cblas_sgemm, fp32 accumulation: |dx − exact| ≤ N·2⁻²⁴·Σ_n|dy·w|. Exception: with a
/// bf16 w on the onednn path (ops/bf16_gemm.h, bf16_training_gemm_path) both products
/// are oneDNN bf16 matmuls, dx = bf16(dy)·w and dw (+)= bf16(dy)ᵀ·bf16(x), f32
/// accumulation (PyTorch's bf16 backward), not batch-invariant. dx must not alias
/// dy, x or w; dw must not alias anything. Throws ShapeError on mismatched shapes, another
/// dtype or a non-contiguous last dimension; with a bf16 w, InputError when
/// OLMO2_BF16_GEMM names no path.
/// Source: d(x wᵀ) — the standard `torch.nn.Linear` gradient.
void linear_backward(const TensorView& x, const TensorView& w, const TensorView& dy,
                     const TensorView& dx, const TensorView& dw, bool accumulate_dw = true,
                     bool accumulate_dx = false);

/// Backward of `embedding`: dtable[ids[i], :] += dout[i, :] for every i (ids may repeat;
/// repeats add up, in increasing i). ids [n] i32, dout [n, h], dtable [V, h]. Always
/// accumulates. Throws InputError naming the id and V when an id is outside [0, V)
/// (checked before any write), ShapeError on mismatched shapes.
void embedding_backward(const TensorView& ids, const TensorView& dout, const TensorView& dtable);

/// Backward of `embedding_slice`: dtable[ids[i] − first_id, :] += dout[i, :] for the ids
/// in [first_id, first_id + V_local); other ids are another rank's and are skipped.
/// The same order of additions as embedding_backward. Source: Megatron-LM's
/// VocabParallelEmbedding.
void embedding_slice_backward(const TensorView& ids, const TensorView& dout, int64_t first_id,
                              const TensorView& dtable);

/// Backward of `rmsnorm` (f32 path): y = w ⊙ x·r with r = 1/sqrt(mean(x²) + eps) per row.
/// x, dy, dx [T, D] f32; w [D] f32 or bf16 (a bf16 w gives the bits of its f32 widening);
/// dw [D] f32. With g = w ⊙ dy:
///   dx  = r·g − x · r³ · (Σ_i g_i x_i) / D          (overwritten)
///   dw += Σ_rows dy ⊙ x · r                          (always accumulated)
/// dx may alias x or dy. dw may be an empty view to skip the weight gradient.
/// Composed of rmsnorm_backward_partials + rmsnorm_backward_finish (below).
/// Throws ShapeError on mismatched shapes or non-f32 views.
/// Source: derivative of `Olmo2RMSNorm` (transformers' modeling_olmo2.py).
void rmsnorm_backward(const TensorView& x, const TensorView& w, float eps, const TensorView& dy,
                      const TensorView& dx, const TensorView& dw);

/// First half of the rmsnorm backward, split out for tensor parallelism. For each row t of
/// the (local) x [T, D], w [D] (f32 or bf16), dy [T, D] writes
///   sumsq[t] = Σ_i x[t,i]²          and       dot[t] = Σ_i dy[t,i]·w[i]·x[t,i]
/// (sumsq, dot: [T] f32 views, may be strided). Under TP with the OLMo 2 whole-projection
/// QK-norm the normalized width is split across ranks: the caller all-reduces (sums)
/// sumsq and dot over the TP group and then calls rmsnorm_backward_finish with the global
/// width. Throws ShapeError on mismatched shapes.
void rmsnorm_backward_partials(const TensorView& x, const TensorView& w, const TensorView& dy,
                               const TensorView& sumsq, const TensorView& dot);

/// Second half of the rmsnorm backward: given the GLOBAL per-row sumsq and dot (see
/// rmsnorm_backward_partials) and the global normalized width d_total (= D without TP),
/// with r = 1/sqrt(sumsq[t]/d_total + eps) writes
///   dx[t,i] = r·w[i]·dy[t,i] − x[t,i]·r³·dot[t]/d_total   (overwritten)
///   dw[i]  += Σ_t dy[t,i]·x[t,i]·r                         (accumulated; dw may be empty)
/// on the local columns; w f32 or bf16, the others f32. dx may alias x or dy. Throws
/// ShapeError on mismatched shapes or d_total < D.
void rmsnorm_backward_finish(const TensorView& x, const TensorView& w, float eps, int64_t d_total,
                             const TensorView& dy, const TensorView& sumsq, const TensorView& dot,
                             const TensorView& dx, const TensorView& dw);

/// Backward of `rope`: rotates dy [T, n_heads·head_dim] IN PLACE by −angle (the inverse of
/// the forward rotation, which is orthogonal, so its transpose is its inverse):
///   dx[i]   =  dy[i]·cos a + dy[i+h]·sin a
///   dx[i+h] =  dy[i+h]·cos a − dy[i]·sin a
/// with the same fp32 angles a = positions[t]·f.inv_freq[i] as `rope` (positions [T] i32),
/// cos and sin each times f.attention_scaling (the forward is then s times a rotation, and
/// its transpose is s times the inverse rotation). Throws ShapeError when the width is not
/// n_heads·head_dim, head_dim is odd or f.inv_freq has not head_dim/2 entries.
void rope_backward(const TensorView& dy, const TensorView& positions, int n_heads, int head_dim,
                   const RopeFrequencies& f);
/// Plain RoPE's backward (RopeFrequencies::standard(theta, head_dim)).
inline void rope_backward(const TensorView& dy, const TensorView& positions, int n_heads, int head_dim, float theta) {
  rope_backward(dy, positions, n_heads, head_dim, RopeFrequencies::standard(theta, head_dim));
}

/// Backward of `causal_attention` (act = f32) for one sequence: q [T, H·hd]; k, v
/// [S, KV·hd], S ≥ T, query t sees keys 0 … S−T+t (with `window` > 0 only the last
/// `window` of them, as `causal_attention`); dout [T, H·hd]. Recomputes the softmax
/// probabilities P (scale 1/sqrt(hd)), then per query head h (kv head h/(H/KV)):
///   dP = dO·Vᵀ,  dS = P ⊙ (dP − rowsum(P ⊙ dP)) · scale,
///   dq = dS·K,   dk += dSᵀ·Q,   dv += Pᵀ·dO
/// dq [T, H·hd], dk, dv [S, KV·hd] are OVERWRITTEN; dk/dv hold the sum over the H/KV
/// query heads sharing each kv head (and include the gradient for the cached prefix rows
/// 0 … S−T−1). Outputs must not alias the inputs. Throws ShapeError on inconsistent shapes
/// or H % KV ≠ 0. Source: derivative of `eager_attention_forward` (modeling_olmo2.py).
void causal_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& dout, int n_heads, int n_kv_heads,
                               const TensorView& dq, const TensorView& dk, const TensorView& dv,
                               int64_t window = 0);

/// Backward of `swiglu` (f32 path): out = silu(g)·u with silu(g) = g·σ(g), σ = logistic:
///   dgate = dout·u·σ(g)·(1 + g·(1 − σ(g))),    dup = dout·silu(g)    (both overwritten)
/// gate, up, dout, dgate, dup [T, I]. dgate/dup may alias gate, up or dout (each element is
/// read before it is written), but not each other. Throws ShapeError on mismatched shapes.
void swiglu_backward(const TensorView& gate, const TensorView& up, const TensorView& dout,
                     const TensorView& dgate, const TensorView& dup);

/// Target value that excludes a token from the loss (PyTorch's default ignore_index).
inline constexpr int32_t kIgnoreIndex = -100;

/// Sums returned by cross_entropy_zloss. None is divided by anything.
struct CrossEntropySums {
  double ce_sum = 0.0;  ///< Σ over counted tokens of (logsumexp(logits[t]) − logits[t, target])
  double z_sq_sum = 0.0;  ///< Σ over counted tokens of logsumexp(logits[t])² (NOT × z_coef)
  int64_t count = 0;      ///< number of tokens whose target is not kIgnoreIndex
};

/// Fused cross-entropy + z-loss forward and backward over logits [T, V] f32 and
/// targets [T] i32 (targets[t] ∈ [0, V) or kIgnoreIndex). With z_t = logsumexp(logits[t]) and
/// p = softmax(logits[t]), for every counted row writes (when dlogits is not empty)
///   dlogits[t] = scale·(p − onehot(target)) + scale·z_coef·2·z_t·p
/// i.e. the gradient of scale·(CE_t + z_coef·z_t²); ignored rows are written as zeros.
/// The caller passes scale = 1/(global count of non-ignored tokens) so that the loss is
/// (ce_sum + z_coef·z_sq_sum)/count summed over micro-batches and DP ranks (never
/// averages of averages: docs/architecture.md §7, §11.4). dlogits [T, V] may alias logits (in-place, saves memory).
/// Statistics are fp32 with a max shift; the exp sums and the returned sums are fp64.
/// Throws InputError naming the row and value for a target outside [0, V) that is not
/// kIgnoreIndex (checked before any write), ShapeError on mismatched shapes.
/// Source: `torch.nn.functional.cross_entropy` + OLMo-core's z-loss.
CrossEntropySums cross_entropy_zloss(const TensorView& logits, const TensorView& targets, float z_coef,
                                     float scale, const TensorView& dlogits);

/// Checks that every target of `targets` ([T] i32) is kIgnoreIndex or in [0, vocab_size);
/// throws InputError naming the first other one and its row. What the losses check
/// before any write or collective.
void check_targets(const TensorView& targets, int64_t vocab_size);

/// The vocab-parallel cross-entropy in three ops around two all-reduces (the collectives
/// are the caller's: parallel::vocab_parallel_cross_entropy). This rank holds logits
/// [T, V_local] f32 of ids vocab_begin … vocab_begin + V_local − 1, of which the first
/// `real_cols` are real. targets [T] i32 (global ids or kIgnoreIndex).
///  1. row_max [T] f32 ← max over the real columns of each row (−∞ when none);
///  2. (after an all-reduce max of row_max) stats [T, 2] f32 ← (Σ_i exp(x_i − max) over
///     the real columns, summed in fp64 then rounded; the target's logit if this rank
///     holds it, else 0); when dlogits is set, dlogits ← exp(x − max) on the real
///     columns;
///  3. (after an all-reduce sum of stats) the loss sums of the counted rows, and
///     dlogits ← scale·(1 + 2·z_coef·lse)·softmax − scale·onehot on the real columns,
///     zeros elsewhere and on ignored rows.
/// dlogits may alias logits. Source: Megatron-LM's vocab-parallel cross-entropy.
void vocab_parallel_ce_row_max(const TensorView& logits, int64_t real_cols, const TensorView& row_max);
void vocab_parallel_ce_partials(const TensorView& logits, int64_t real_cols, int64_t vocab_begin,
                                const TensorView& targets, const TensorView& row_max, const TensorView& stats,
                                const TensorView& dlogits);
CrossEntropySums vocab_parallel_ce_finish(const TensorView& row_max, const TensorView& stats,
                                          const TensorView& targets, int64_t vocab_begin, int64_t real_cols,
                                          float z_coef, float scale, const TensorView& dlogits);

}  // namespace olmo2::ops
