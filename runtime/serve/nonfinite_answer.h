// What a request gets when its forward computed a NaN or an infinity
// (docs/architecture.md §13 "Limits and errors"): never a 200 with garbage tokens.
#pragma once

#include <cstdint>

#include "runtime/serve/serve_request.h"

namespace olmo2 {

/// Token id the results carry for a sequence whose rows came out of the final norm
/// non-finite (ForwardResult::nonfinite): deliver() ends its request with
/// nonfinite_answer instead of emitting a token.
inline constexpr int32_t kNonFiniteToken = -2;

/// The last chunk of a request whose forward went non-finite at `position`: with
/// interventions, a 400 naming them (param "interventions": the steering made the
/// activations overflow f32); without, a 500 (the model itself did — a broken
/// checkpoint or an overflow in its weights), naming where it was seen: the residual
/// stream after the last layer, layers.<num_layers − 1>.layer_output, entering the final
/// norm.
CompletionChunk nonfinite_answer(const CompletionParams& params, int64_t position, int64_t num_layers);

}  // namespace olmo2
