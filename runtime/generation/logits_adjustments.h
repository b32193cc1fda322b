// Per-request changes to the logits before the token is chosen: logit_bias and the
// presence, frequency and repetition penalties, as vLLM defines them.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace olmo2 {

/// The adjustments a request asks for. Applied to the raw logits, in this order:
/// repetition penalty (vLLM / CTRL: a logit l of a token seen in the prompt or the output
/// becomes l / r when l > 0, l × r otherwise), frequency and presence penalties (OpenAI:
/// l − count × frequency − (count > 0) × presence, over the output's tokens), then the
/// logit bias (added). Temperature and the other sampling steps follow.
struct LogitsAdjustments {
  std::vector<std::pair<int32_t, float>> logit_bias;  ///< (token id, bias in [−100, 100]), ids ascending, unique
  double presence_penalty = 0;    ///< [−2, 2]
  double frequency_penalty = 0;   ///< [−2, 2]
  double repetition_penalty = 1;  ///< > 0; 1 = none
  bool any() const {
    return !logit_bias.empty() || presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1;
  }
};

}  // namespace olmo2
