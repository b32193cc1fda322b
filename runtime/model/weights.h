// The weight tensors of an OLMo 2 model (or of one rank's shard of it), in the Hugging
// Face layout: linear weights [out, in].
#pragma once

#include <vector>

#include "ops/quantized_linear.h"
#include "ops/tensor.h"

namespace olmo2 {

/// A decoder layer's linear weights quantized at load (runtime/model/quantized_weights.h,
/// docs/architecture.md §3.2 "Quantized weights"): each empty when that weight is held
/// dense; when one is set, LayerWeights' dense tensor of the same name is empty.
struct QuantizedLinears {
  ops::QuantizedWeight q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
};

/// Weights of one decoder layer (this rank's slices of them under tensor parallelism).
struct LayerWeights {
  Tensor q_proj, k_proj, v_proj, o_proj;  ///< [H·hd, h], [KV·hd, h] ×2, [h, H·hd]
  Tensor q_norm, k_norm;                  ///< [H·hd], [KV·hd]
  Tensor gate_proj, up_proj, down_proj;   ///< [I, h] ×2, [h, I]
  Tensor post_attention_layernorm, post_feedforward_layernorm;  ///< [h]
  /// Serving with quantized weights: the linear weights above, quantized (those then empty).
  QuantizedLinears quantized;
};

/// All weights of the model (or of a rank's shard: its layers, and the embedding and
/// the final norm + lm_head only on the stages that hold them).
struct ModelWeights {
  Tensor embed_tokens;  ///< [V, h] (this rank's vocab rows)
  std::vector<LayerWeights> layers;
  Tensor norm;          ///< [h]
  Tensor lm_head;       ///< [V, h]; empty when tied to embed_tokens
  /// Serving with quantized weights (runtime/model/quantized_weights.h): lm_head (or, tied,
  /// a quantized copy of embed_tokens' rows) as int8 with one scale per output channel;
  /// lm_head is then empty. Empty otherwise.
  ops::QuantizedWeight lm_head_quantized;
};

/// The device of the first non-empty tensor of `w` (embedding, layers, norm, lm_head);
/// CPU when every tensor is empty.
Device weights_device(const ModelWeights& w);

/// Every tensor of `w` (empty ones stay empty) converted to `dtype` (f32 or bf16; bf16
/// rounds to nearest even) in new tensors on the same device — e.g. the bf16 compute
/// copy of f32 master weights.
ModelWeights weights_in(const ModelWeights& w, DType dtype);

/// Every tensor of `w` (empty ones stay empty) copied to `device`, dtypes unchanged — how
/// weights loaded or initialised on the host reach the device that computes (training on
/// a GPU: docs/architecture.md §2). Copies even when `w` is already there.
ModelWeights weights_on(const ModelWeights& w, Device device);

/// Copies every tensor of `src` into the tensor of the same place in `dst` (same
/// shapes; dtypes f32/bf16, converting; tensors empty in both are skipped) — e.g. master
/// weights into their compute copy after an optimizer step. ShapeError when the
/// structures differ.
void copy_weights(const ModelWeights& src, ModelWeights& dst);

}  // namespace olmo2
