// The weight tensors of an OLMo 2 model (or of one rank's shard of it), in the Hugging
// Face layout: linear weights [out, in].
#pragma once

#include <vector>

#include "ops/tensor.h"

namespace olmo2 {

/// Weights of one decoder layer (this rank's slices of them under tensor parallelism).
struct LayerWeights {
  Tensor q_proj, k_proj, v_proj, o_proj;  ///< [H·hd, h], [KV·hd, h] ×2, [h, H·hd]
  Tensor q_norm, k_norm;                  ///< [H·hd], [KV·hd]
  Tensor gate_proj, up_proj, down_proj;   ///< [I, h] ×2, [h, I]
  Tensor post_attention_layernorm, post_feedforward_layernorm;  ///< [h]
};

/// All weights of the model (or of a rank's shard: its layers, and the embedding and
/// the final norm + lm_head only on the stages that hold them).
struct ModelWeights {
  Tensor embed_tokens;  ///< [V, h] (this rank's vocab rows)
  std::vector<LayerWeights> layers;
  Tensor norm;          ///< [h]
  Tensor lm_head;       ///< [V, h]; empty when tied to embed_tokens
};

}  // namespace olmo2
