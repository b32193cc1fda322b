// Causal scaled-dot-product attention with grouped-query (GQA) heads.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/tensor.h"

namespace olmo2::ops {

/// Attention for one sequence. q [T, H·hd]; k, v [S, KV·hd] with S ≥ T: the T queries
/// are the last T positions, so query t sees keys 0 … S−T+t (causal); with `window` > 0
/// (a sliding-window layer) only keys max(0, S−T+t−window+1) … S−T+t, the last `window`
/// positions including its own, exactly what transformers' sliding-window causal mask
/// keeps (`kv_idx > q_idx − sliding_window`); 0 means no window. Keys before the first
/// query's window are never read (their rows may hold anything). out [T, H·hd].
/// Query head h uses kv head h / (H/KV) (GQA by repetition). Scale 1/sqrt(hd), softmax
/// in fp32. `act` is the dtype the reference stores activations in: with bf16 the
/// scores q·kᵀ, the scaled scores, the probabilities and the output are rounded to
/// bf16 where the reference rounds them (the scores twice: the product, then the
/// product times the scale). All views f32 CPU with contiguous last dimension.
/// Source: `eager_attention_forward` in transformers' modeling_olmo2.py.
/// Throws ShapeError on inconsistent shapes, H % KV ≠ 0 or window < 0.
void causal_attention(const TensorView& q, const TensorView& k, const TensorView& v, int n_heads,
                      int n_kv_heads, const TensorView& out, DType act = DType::F32, int64_t window = 0);

/// The largest scaled score q_t·k_s/√hd over the causal pairs (s ≤ S−T+t) of one
/// sequence, over every head of q (query head h uses kv head h/(H/KV)): the "max
/// attention logit" training monitors. q [T, H·hd], k [S, KV·hd] f32, S ≥ T; with
/// `window` > 0 only the pairs `causal_attention` sees with that window.
/// −∞ for T = 0. Throws ShapeError on inconsistent shapes.
float causal_attention_max_logit(const TensorView& q, const TensorView& k, int n_heads, int n_kv_heads,
                                 int64_t window = 0);

}  // namespace olmo2::ops
