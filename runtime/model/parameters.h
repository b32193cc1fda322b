// The trainable parameters of an Olmo2Model as a flat, named list: what the optimizer,
// the initializer, gradient clipping and checkpoints iterate over.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/tensor.h"
#include "runtime/model/config.h"
#include "runtime/model/model.h"

namespace olmo2 {

/// One parameter tensor of this rank. `value` and `grad` are f32 tensors on one device
/// (the model's; the optimizer keeps its moments beside them), of the
/// same (local) shape. Names are the Hugging Face state-dict names
/// ("model.layers.3.mlp.up_proj.weight").
///
/// Sharding (docs/architecture.md §5): this rank holds the rows [shard_begin, shard_end) of
/// dimension `shard_dim` of the full tensor of shape `full_shape` (shard_dim = -1: the whole
/// tensor). Vocab-sharded tensors (embedding, lm_head) may include padding rows
/// ≥ vocab_size at their end: rows [shard_begin, shard_begin + local rows) of the
/// padded table, of which only those < full_shape[0] are real.
struct Parameter {
  std::string name;
  std::vector<int64_t> full_shape;
  Tensor* value = nullptr;
  Tensor* grad = nullptr;
  bool weight_decay = true;  ///< false only for model.embed_tokens.weight (OLMo 2 recipe)
  int shard_dim = -1;
  int64_t shard_begin = 0, shard_end = 0;
  /// True when every rank of the TP group holds an identical copy (norm gains of
  /// width hidden_size): the global grad norm counts it once, not once per rank (C5).
  bool tp_replicated = false;
  /// k_proj, v_proj and k_norm of a kv head held by several TP ranks (KV < tp): how many
  /// hold it (1: not replicated) and which of them this rank is. Each replica's gradient
  /// is partial until sum_kv_replica_gradients; then only replica 0 counts it in the
  /// grad norm and writes it to a checkpoint.
  int kv_replicas = 1, kv_replica = 0;
  /// True when this rank's copy is the one counted in the grad norm and written to a
  /// checkpoint within its DP replica: not a TP-replicated gain on TP rank ≠ 0 (`tp_rank`),
  /// not a kv-head replica other than the first.
  bool owned(int tp_rank) const { return !(tp_replicated && tp_rank != 0) && kv_replica == 0; }

  int64_t numel() const { return value->numel(); }
  /// Index in the full (unsharded, unpadded) tensor of local element `i`, in row-major
  /// order of full_shape; -1 for an element of a padding row.
  int64_t global_index(int64_t i) const;
};

/// Lists the parameters `weights` holds, in the order of the HF state dict
/// (embed_tokens, layers 0…L-1 each q,k,v,o,q_norm,k_norm, gate,up,down,
/// post_attention_layernorm, post_feedforward_layernorm, then norm, lm_head), pairing each with the
/// same member of `grads` (which must have the same structure and shapes; allocate it
/// with zeros_like_weights). Layer names use the global layer index of `shard`.
/// Tensors that are empty in `weights` (a stage without the embedding) are skipped.
/// Throws ShapeError when `grads` does not match `weights`.
std::vector<Parameter> list_parameters(ModelWeights& weights, ModelWeights& grads,
                                       const ModelConfig& config, const ShardSpec& shard);

/// f32 zeros in the shapes `shard` of the model `config` holds (what a rank
/// initialises or loads into): q/k/v/gate/up rows and o/down columns of its heads and
/// MLP rows, its layers, the (padded) vocab rows when it has the embedding or the
/// final norm + lm_head (lm_head omitted when tied); on `device`.
ModelWeights zero_weights(const ModelConfig& config, const ShardSpec& shard, Device device = Device::CPU);

/// The whole model's tensors by HF name in state-dict order (list_parameters' order),
/// as views of `weights` (a whole, unsharded model) — what CheckpointContents takes.
std::vector<std::pair<std::string, TensorView>> hf_named_tensors(ModelWeights& weights, const ModelConfig& config);

/// A ModelWeights of f32 zeros with the shapes of `w`, each on its tensor's device (empty
/// where `w` is empty).
ModelWeights zeros_like_weights(const ModelWeights& w);

}  // namespace olmo2
