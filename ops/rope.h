// Rotary position embedding, half-split (rotate_half) form.
#pragma once

#include <cstdint>

#include "ops/tensor.h"

namespace olmo2::ops {

/// Rotates x in place: x [T, n_heads·head_dim] f32, row t at position positions[t]
/// (positions: [T] i32). For each head, with h = head_dim/2,
/// inv_freq[i] = 1/theta^(2i/head_dim) and a = positions[t]·inv_freq[i], all fp32:
///   x'[i]   = x[i]·cos a − x[i+h]·sin a
///   x'[i+h] = x[i+h]·cos a + x[i]·sin a
/// Source: `apply_rotary_pos_emb` / `rotate_half` in transformers' modeling_olmo2.py.
/// Throws ShapeError when the width is not n_heads·head_dim, head_dim is odd or
/// positions has another length.
void rope(const TensorView& x, const TensorView& positions, int n_heads, int head_dim, float theta);

}  // namespace olmo2::ops
