// Token embedding lookup, whole or from one rank's slice of the vocabulary.
#pragma once

#include <cstdint>

#include "ops/tensor.h"

namespace olmo2::ops {

/// out[i, :] = table[ids[i], :]. ids [n] i32; table [V, h] f32 or bf16 (widened exactly),
/// out [n, h] f32; last dimensions contiguous. ShapeError for other dtypes or shapes.
/// Throws InputError naming the id and V when an id is outside [0, V).
/// Source: `torch.nn.Embedding` (no scaling; OLMo 2 does not scale embeddings).
void embedding(const TensorView& ids, const TensorView& table, const TensorView& out);

/// The vocab-parallel form: `table` [V_local, h] holds the rows of ids
/// first_id … first_id + V_local − 1; out[i, :] = table[ids[i] − first_id, :] for ids in
/// that range and zeros for the others (another rank holds them; summing every rank's
/// out over the tensor-parallel group gives the embedding). ids [n] i32, table f32 or
/// bf16, out [n, h] f32.
/// Source: Megatron-LM's VocabParallelEmbedding.
void embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id, const TensorView& out);

}  // namespace olmo2::ops
