// OLMo 2's whole-projection QK-norm with q and k split over tensor-parallel ranks.
#pragma once

#include <cstdint>

#include "ops/tensor.h"
#include "parallel/communicator.h"

namespace olmo2::parallel {

/// Normalizes this rank's slices of q and k in place as the unsplit model normalizes
/// the whole projections (transformers' Olmo2Attention: q_norm over H·hd, k_norm over
/// KV·hd, before the head split and RoPE), exchanging only statistics:
///   1. per token t, fp32 partial sums Σq², Σk² of the local slices → a [T, 2] buffer;
///   2. one all-reduce (sum) of that buffer over `tp` (8 bytes per token per layer,
///      instead of gathering q and k as vLLM/SGLang do);
///   3. q ← w_q ⊙ q · rsqrt(Σq² / q_width + eps), k likewise, each rank with its own
///      slice of the norm weights.
/// A kv head replicated on several TP ranks (KV < tp) must be counted once: pass
/// `k_counts` = true on exactly one rank of each replica set (the first).
/// q [T, q_local] and w_q [q_local], k [T, k_local] and w_k [k_local]: f32, one device.
/// q_width, k_width: the global widths H·hd and KV·hd. Computed by ops::rmsnorm_partials
/// and ops::rmsnorm_apply, so each rank's slice equals the unsplit rmsnorm's columns up
/// to the order of the sums. Throws ShapeError on mismatched shapes; CollectiveTimeout
/// if a peer never joins. Source: docs/architecture.md §5 and §11.1 (the whole-projection
/// QK-norm split over TP ranks: q = [1, 2 | 3, 4] normalizes to
/// [0.3651, 0.7303 | 1.0954, 1.4606], not each half alone).
void tp_qk_norm(const TensorView& q, const TensorView& w_q, int64_t q_width, const TensorView& k,
                const TensorView& w_k, int64_t k_width, bool k_counts, float eps, Communicator& tp);

/// The backward of tp_qk_norm, with one [4, T] all-reduce of (Σq², Σg·w·q, Σk², Σg·w·k).
/// q0, k0: the projections before the norm (this rank's slices); dq, dk: in, the
/// gradients at the normalized q and k; out (in place), the gradients at q0 and k0.
/// dw_q, dw_k: the norm weights' gradients, accumulated (may be empty to skip). A kv
/// head replicated on several ranks (k_counts false on all but the first) gets on each
/// replica a partial dk from its own query heads: every replica adds its partial Σg·w·k,
/// only the first adds Σk² and applies the −k·r³·dot term, so the replicas' gradients
/// sum to the unsplit ones (the caller sums k/v gradients over replicas afterwards).
/// Throws ShapeError on mismatched shapes; CollectiveTimeout if a peer never joins.
/// Source: the derivative of Olmo2RMSNorm; docs/architecture.md §5.
void tp_qk_norm_backward(const TensorView& q0, const TensorView& w_q, int64_t q_width, const TensorView& dq,
                         const TensorView& dw_q, const TensorView& k0, const TensorView& w_k, int64_t k_width,
                         const TensorView& dk, const TensorView& dw_k, bool k_counts, float eps, Communicator& tp);

}  // namespace olmo2::parallel
