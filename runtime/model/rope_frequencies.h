// The rotary frequencies of a layer type: plain RoPE or YaRN, computed in f32 exactly as
// transformers computes them (docs/architecture.md §3).
#pragma once

#include "ops/rope.h"
#include "runtime/model/config.h"

namespace olmo2 {

/// inv_freq [head_dim/2] and the cos/sin scaling of `p` for heads of `head_dim`.
/// "default": inv_freq[i] = 1/θ^(2i/hd), scaling 1 (`compute_default_rope_parameters`).
/// "yarn" (Peng et al., 2023, "YaRN: Efficient Context Window Extension of Large Language
/// Models"; transformers' `_compute_yarn_parameters`, modeling_rope_utils.py): with
/// pos_freqs = θ^(2i/hd) (f32), the correction range [low, high] from beta_fast/beta_slow
/// over original_max_position_embeddings (in double, floored/ceiled when truncate,
/// clamped to [0, hd−1] as the reference clamps it), the f32 ramp
/// r_i = clamp((i − low)/(high − low), 0, 1) and e_i = 1 − r_i:
///   inv_freq[i] = (1/(factor·pos_freqs)) · (1 − e_i) + (1/pos_freqs) · e_i     (f32 ops)
/// and scaling = attention_factor, else 0.1·ln(factor) + 1 (1 when factor ≤ 1).
/// Each f32 operation is rounded where PyTorch rounds it, so the result matches
/// transformers bit for bit (tests/model/fixtures/rope_frequencies.json).
/// Throws InputError for an unknown type or head_dim ≤ 0 / odd.
ops::RopeFrequencies rope_frequencies(const RopeParameters& p, int head_dim);

}  // namespace olmo2
