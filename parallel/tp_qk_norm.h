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
/// q [T, q_local] and w_q [q_local], k [T, k_local] and w_k [k_local]: f32 CPU.
/// q_width, k_width: the global widths H·hd and KV·hd. Throws ShapeError on
/// mismatched shapes; CollectiveTimeout if a peer never joins.
/// Source: DESIGN §4; cases C1 in shared/cases.
void tp_qk_norm(const TensorView& q, const TensorView& w_q, int64_t q_width, const TensorView& k,
                const TensorView& w_k, int64_t k_width, bool k_counts, float eps, Communicator& tp);

}  // namespace olmo2::parallel
