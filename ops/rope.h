// Rotary position embedding, half-split (rotate_half) form.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/tensor.h"

namespace olmo2::ops {

/// The rotary frequencies of one layer type: inv_freq [head_dim/2] f32 and the factor
/// applied to cos and sin (YaRN's attention factor; 1 for plain RoPE). Made by
/// `rope_frequencies` (runtime/model/rope_frequencies.h) from a config's RoPE parameters.
struct RopeFrequencies {
  std::vector<float> inv_freq;
  float attention_scaling = 1.0f;
  /// Plain RoPE: inv_freq[i] = 1/theta^(2i/head_dim) in f32, scaling 1 (transformers'
  /// `compute_default_rope_parameters`).
  static RopeFrequencies standard(float theta, int head_dim);
};

/// Rotates x in place: x [T, n_heads·head_dim] f32, row t at position positions[t]
/// (positions: [T] i32). For each head, with h = head_dim/2, a = positions[t]·inv_freq[i],
/// c = cos(a)·s and n = sin(a)·s (s = f.attention_scaling; each product rounded to f32,
/// as transformers scales its cos/sin tables), all fp32:
///   x'[i]   = x[i]·c − x[i+h]·n
///   x'[i+h] = x[i+h]·c + x[i]·n
/// Source: `apply_rotary_pos_emb` / `rotate_half` and the rotary embedding's forward in
/// transformers' modeling_olmo2.py / modeling_olmo3.py. Throws ShapeError when the width
/// is not n_heads·head_dim, head_dim is odd, f.inv_freq has not head_dim/2 entries or
/// positions has another length.
void rope(const TensorView& x, const TensorView& positions, int n_heads, int head_dim, const RopeFrequencies& f);

/// Plain RoPE: rope(x, positions, n_heads, head_dim, RopeFrequencies::standard(theta, head_dim)).
inline void rope(const TensorView& x, const TensorView& positions, int n_heads, int head_dim, float theta) {
  rope(x, positions, n_heads, head_dim, RopeFrequencies::standard(theta, head_dim));
}

}  // namespace olmo2::ops
