// The seam through which a forward's activations are read and changed: named points
// (nnterp's standard names for OLMo 2) where the forward hands its tensors to a tap
// (docs/architecture.md §13). A forward without a tap pays one null check per point.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/tensor.h"

namespace olmo2 {

/// The points of the forward where a tap is called, in the order they run. Each names
/// one of nnterp's standard values (several names can share one point: attention_premix
/// and attention_head_outputs are o_proj's input, mlp_input is layer_mid, logits is
/// lm_head_output since OLMo 2 applies nothing after lm_head).
enum class TapSite : int32_t {
  TokenEmbeddings = 0,     ///< model-wide: embed_tokens' output [T, h]
  LayerInput,              ///< the residual stream entering a layer [T, h]
  AttentionQueries,        ///< after QK-norm and RoPE, this rank's query heads [T, nh_l·hd]
  AttentionKeys,           ///< after QK-norm and RoPE, this rank's kv heads [T, nkv_l·hd]
  AttentionValues,         ///< this rank's kv heads [T, nkv_l·hd]
  AttentionProbabilities,  ///< the softmax the values are mixed with (ForwardTap::attention)
  AttentionHeadOutputs,    ///< every head's output, o_proj's input, this rank's heads [T, nh_l·hd]
  AttentionOutput,         ///< post_attention_layernorm's output, what attention adds [T, h]
  LayerMid,                ///< the residual stream after the attention add, the MLP's input [T, h]
  MlpNeurons,              ///< act(gate)·up, down_proj's input, this rank's MLP rows [T, inter_l]
  MlpOutput,               ///< post_feedforward_layernorm's output, what the MLP adds [T, h]
  LayerOutput,             ///< the residual stream leaving a layer [T, h]
  FinalNormOutput,         ///< model-wide: model.norm's output, what lm_head reads [T, h]
  LmHeadOutput,            ///< model-wide: lm_head's output, this rank's vocab rows [R, vocab_rows]
  Count
};

/// Which rows of a tapped tensor belong to which sequence: sequence i owns rows
/// offset[i] … offset[i+1]−1, the first of them at token position first_position[i], the
/// next ones at consecutive positions. (For a forward's new tokens: the packed batch's
/// offsets and starts; for lm_head_output with last-row logits: one row per sequence.)
struct TapRows {
  std::vector<int64_t> offset;          ///< sequences + 1 entries, offset[0] = 0
  std::vector<int64_t> first_position;  ///< per sequence
  size_t sequences() const { return first_position.size(); }
};

/// What a forward calls at each TapSite (docs/architecture.md §13). Layers are indexed in
/// the whole model (−1 for the model-wide sites). The forward calls wants() before a
/// site and, only when it returns true, the site's call; a tap may change `rows` in
/// place (an intervention), and the forward goes on with the changed values. Tensors
/// lie on the model's device and hold this rank's columns only (the ShardSpec's heads,
/// MLP rows or vocab rows; replicated columns on every TP rank). Called by every rank of
/// the TP group at the same sites (the tap must answer wants() identically on them).
class ForwardTap {
 public:
  virtual ~ForwardTap() = default;
  /// Whether `site` of `layer` is read or changed for any sequence of this forward.
  virtual bool wants(TapSite site, int64_t layer) const = 0;
  /// `rows` [R, width] f32: the site's tensor for the rows `where` describes.
  virtual void at(TapSite site, int64_t layer, const TapRows& where, const TensorView& rows) = 0;
  /// Whether AttentionProbabilities of `layer` are read for sequence `seq` of this
  /// forward (the forward gathers a sequence's keys only for those).
  virtual bool wants_attention(int64_t layer, size_t seq) const = 0;
  /// AttentionProbabilities of sequence `seq` of `where`: its queries q [n, nh_l·hd] (after
  /// QK-norm and RoPE) at positions where.first_position[seq] …, and the keys it may attend
  /// to, keys [m, nkv_l·hd] at positions keys_first … keys_first+m−1 (the last one the
  /// sequence's last new position); `window` the layer's attention window (0: none). The
  /// tap computes softmax(q·kᵀ/√hd) with the causal and window mask itself.
  virtual void attention(int64_t layer, const TapRows& where, size_t seq, const TensorView& q,
                         const TensorView& keys, int64_t keys_first, int64_t window) = 0;
};

}  // namespace olmo2
