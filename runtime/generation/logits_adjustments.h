// Per-request changes to the logits before the token is chosen: logit_bias and the
// presence, frequency and repetition penalties, as vLLM defines them.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace olmo2 {

/// The adjustments a request asks for. Applied to the raw logits in vLLM's order (its v1
/// Sampler: the processors that can change the argmax, then the penalties), all in f32:
/// tokens banned by min_tokens get −∞, the logit bias is added; then the repetition
/// penalty (CTRL, as vLLM's kernel: a logit l of a token seen in the prompt or the output
/// becomes l / r when l > 0, l × r otherwise), then the frequency and presence penalties
/// (OpenAI: l − frequency × count, then − presence × (count > 0), over the output's
/// tokens). Temperature, min_p, top-k and top-p follow (runtime/generation/sampling.h).
struct LogitsAdjustments {
  std::vector<std::pair<int32_t, float>> logit_bias;  ///< (token id, bias in [−100, 100]), ids ascending, unique
  double presence_penalty = 0;    ///< [−2, 2]
  double frequency_penalty = 0;   ///< [−2, 2]
  double repetition_penalty = 1;  ///< > 0; 1 = none
  bool any() const {
    return !logit_bias.empty() || presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1;
  }
  /// Whether a penalty is set (then the output's token counts are needed).
  bool penalties() const { return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1; }
};

/// Applies `banned` and `adjust` (in the order above) to `logits`, the logits of ids
/// first_id … first_id + logits.size() − 1 (one TP rank's real slice): ids outside it
/// are skipped, so each rank adjusts its own slice only. `banned`: ids set to −∞ (the
/// min_tokens ban); `prompt_ids`: the prompt's distinct ids (repetition penalty only);
/// `output_counts`: (id, times generated) of the output's distinct ids (penalties only).
/// Every list ascending by id without repeats; throws Error naming the position
/// otherwise, and for a repetition penalty ≤ 0 or not finite.
void apply_logits_adjustments(std::span<float> logits, int64_t first_id, const LogitsAdjustments& adjust,
                              std::span<const int32_t> banned, std::span<const int32_t> prompt_ids,
                              std::span<const std::pair<int32_t, int32_t>> output_counts);

/// Sets −∞ on every id of `logits` (ids first_id … first_id + logits.size() − 1, one TP
/// rank's real slice) whose bit in `allowed` is 0 (bit id % 64 of word id / 64; ids
/// past allowed.size() × 64 count as 0): a constraint's mask (docs/architecture.md §8,
/// "Structured outputs"), applied before apply_logits_adjustments.
void apply_allowed_mask(std::span<float> logits, int64_t first_id, std::span<const uint64_t> allowed);

}  // namespace olmo2
