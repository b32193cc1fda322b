// Token embedding lookup.
#pragma once

#include <cstdint>

#include "ops/tensor.h"

namespace olmo2::ops {

/// out[i, :] = table[ids[i], :] for i < n. table [V, h] f32, out [n, h] f32 (CPU).
/// Throws InputError naming the id and V when an id is outside [0, V).
/// Source: `torch.nn.Embedding` (no scaling; OLMo 2 does not scale embeddings).
void embedding(const int32_t* ids, int64_t n, const TensorView& table, const TensorView& out);

}  // namespace olmo2::ops
