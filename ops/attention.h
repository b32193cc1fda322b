// Causal scaled-dot-product attention with grouped-query (GQA) heads.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/tensor.h"

namespace olmo2::ops {

/// Attention for one sequence. q [T, H·hd]; k, v [S, KV·hd] with S ≥ T: the T queries
/// are the last T positions, so query t sees keys 0 … S−T+t (causal). out [T, H·hd].
/// Query head h uses kv head h / (H/KV) (GQA by repetition). Scale 1/sqrt(hd), softmax
/// in fp32. `act` is the dtype the reference stores activations in: with bf16 the
/// scaled scores, probabilities and output are rounded to bf16 where the reference
/// rounds them. All views f32 CPU with contiguous last dimension.
/// Source: `eager_attention_forward` in transformers' modeling_olmo2.py.
/// Throws ShapeError on inconsistent shapes or H % KV ≠ 0.
void causal_attention(const TensorView& q, const TensorView& k, const TensorView& v, int n_heads,
                      int n_kv_heads, const TensorView& out, DType act = DType::F32);

/// Padded batch form: q [B, T, H·hd], k, v [B, T, KV·hd], lengths[b] ≤ T valid tokens
/// per sequence. Keys at or past lengths[b] are masked (padding mask); query rows at or
/// past lengths[b] are written as zeros. out [B, T, H·hd].
void causal_attention_padded(const TensorView& q, const TensorView& k, const TensorView& v,
                             const std::vector<int64_t>& lengths, int n_heads, int n_kv_heads,
                             const TensorView& out, DType act = DType::F32);

}  // namespace olmo2::ops
