// One OLMo 2 decoder layer (Olmo2DecoderLayer in transformers' modeling_olmo2.py), forward
// and backward, for every caller: one process or tensor-parallel, no KV cache (training,
// a plain forward) or a KV cache (generation, serving), with or without the activations
// a backward needs, batch-invariant or BLAS products, f32 or bf16-rounded activations
// (docs/architecture.md §3):
//   q = q_norm(x Wqᵀ), k = k_norm(x Wkᵀ)   over the whole projections, before RoPE
//   v = x Wvᵀ;  q, k = rope(q), rope(k)     (Olmo 3: the layer type's RoPE, YaRN or plain)
//   a = softmax(q kᵀ/√hd + causal) v;  x = x + post_attention_layernorm(a Woᵀ)
//                                           (Olmo 3 sliding layers: within the window)
//   x = x + post_feedforward_layernorm((silu(x Wgᵀ) · x Wuᵀ) Wdᵀ)
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "runtime/model/forward_tap.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/shard_spec.h"
#include "runtime/model/token_batch.h"
#include "runtime/model/weights.h"

namespace olmo2 {

/// What a layer's forward keeps for its backward, and so what the backward recomputes
/// first (activation recomputation; docs/architecture.md §7 "Recomputation"). Each kept
/// tensor is f32 [tokens, width]; the recomputation runs the forward's own operations in
/// the forward's order, so every mode gives bit-identical gradients:
///  - None: every activation of LayerActivations;
///  - Selective: x, q0, k0, v, p, gate, up, m — QK-norm + RoPE, core attention and the
///    attention block's residual sum (x1) are recomputed (Megatron-LM's selective
///    recomputation, Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
///    Transformer Models");
///  - Full: x only — the backward reruns the layer's whole forward (activation
///    checkpointing per layer, Chen et al. 2016; torch.utils.checkpoint).
enum class Recompute { None, Selective, Full };

/// The mode named `text` ("none", "selective" or "full"). Throws InputError naming
/// `option` and the value otherwise.
Recompute parse_recompute(const std::string& text, const std::string& option);

/// The name parse_recompute reads ("none", "selective", "full").
const char* recompute_name(Recompute mode);

/// How a layer computes.
struct LayerOptions {
  /// The dtype the reference stores activations in: bf16 rounds q, k, v, attention
  /// scores and probabilities, projections, norms and sums where transformers' bf16
  /// model materialises them; f32 rounds nothing (training, f32 checkpoints).
  DType activations = DType::F32;
  /// Matrix products by ops::linear_batch_invariant instead of OpenBLAS, and attention
  /// over the KV cache by ops::paged_attention: a sequence's results are then
  /// bit-identical whatever else is in the batch (serving).
  bool batch_invariant = false;
  /// Reads and changes named activations (docs/architecture.md §13); null: none, and the
  /// layer computes exactly as without the seam.
  ForwardTap* tap = nullptr;
  /// With `saved` (training): which activations the forward keeps for its backward; the
  /// rest go to scratch and are recomputed by decoder_layer_backward. Needs no tap.
  Recompute recompute = Recompute::None;
};

/// Where attention finds keys and values: null (no cache) means each sequence's own new
/// tokens only (training, a plain forward: start must be 0); with a cache, every layer
/// first writes its new keys and values into the sequences' blocks of its KV group, then
/// attends to the cached positions its window sees (docs/architecture.md §8).
struct KVCacheBinding {
  const KVCache* cache = nullptr;
  /// Per KV group, per sequence: the group's block table.
  std::vector<std::vector<std::span<const int32_t>>> block_tables;
  std::vector<std::vector<Tensor>> rows;           ///< per group, per sequence: pool rows of its new tokens
  std::vector<std::vector<int64_t>> contiguous;    ///< per group, per sequence: first pool row if consecutive, else −1
};

/// Binds `cache` to the sequences of `packed` with their block tables (each all the
/// cache's groups' tables, KVCache's class comment). Throws ShapeError for a table too
/// short or not made of equal group tables, InputError for a block of a new token
/// outside the pool.
KVCacheBinding bind_kv_cache(const KVCache& cache, const PackedTokens& packed,
                             const std::vector<std::span<const int32_t>>& block_tables);

/// What one layer's backward needs from its forward, each [tokens, width] f32 (this
/// rank's slices under TP). Under a Recompute mode other than None the tensors the mode
/// drops are empty until recompute_activations fills them in.
struct LayerActivations {
  Tensor x;       ///< layer input (residual stream)
  Tensor q0, k0;  ///< q/k projections before QK-norm
  Tensor qr, kr;  ///< after QK-norm and RoPE
  Tensor v;       ///< value projection
  Tensor attn;    ///< attention output, before o_proj
  Tensor lse;     ///< context parallelism: ring attention's log-sum-exp [T, local heads], kept with attn
  Tensor p;       ///< o_proj output (all-reduced), before post_attention_layernorm
  Tensor x1;      ///< residual after the attention block
  Tensor gate, up;
  Tensor m;       ///< down_proj output (all-reduced), before post_feedforward_layernorm
  DType act = DType::F32;  ///< what the forward rounded activations to (LayerOptions::activations)
  int64_t layer = 0;       ///< the layer's index in the whole model (its window and RoPE)
  Recompute recompute = Recompute::None;  ///< what the forward kept (LayerOptions::recompute)
  bool batch_invariant = false;           ///< the forward's products (LayerOptions::batch_invariant)
};

/// One layer's forward statistics (monitoring: docs/architecture.md §9).
struct LayerStats {
  double output_norm_sum = 0;     ///< Σ over tokens of ‖residual stream after the layer‖₂
  double attention_norm_sum = 0;  ///< Σ over tokens of ‖post-norm attention output‖₂
  double mlp_norm_sum = 0;        ///< Σ over tokens of ‖post-norm MLP output‖₂
  float attention_logit_max = -std::numeric_limits<float>::infinity();  ///< max q·k/√hd, this rank's heads (no cache)
};

/// Scratch tensors one forward reuses across its layers (sized on first use).
struct LayerWorkspace {
  Tensor q, k, v, attn, proj, gate, up, act;
  Tensor qr, kr, normed;  ///< training: q/k after QK-norm + RoPE, a post-norm's output
  Tensor lse;             ///< context parallelism: ring attention's log-sum-exp when not kept
};

/// Everything about the model a layer needs besides its weights.
struct LayerContext {
  const ModelConfig& config;
  const ShardSpec& shard;
  parallel::Communicator* tp;  ///< null without tensor parallelism (or with one rank)
  /// Context-parallel group (more than one rank, else null): attention without a KV cache
  /// is ring attention over it, on rows split as packed.context says (docs/architecture.md
  /// §7 "Context parallelism").
  parallel::Communicator* cp = nullptr;
};

/// Forward of local layer `layer` (0 = the shard's first) over the packed rows: x [T, h]
/// f32 is the residual stream, updated in place. Under TP: q/k/v/gate/up
/// column-parallel, the whole-projection QK-norm by one [T, 2] all-reduce, o/down
/// row-parallel with an all-reduce each. With `saved` the activations the backward
/// needs are kept there (no KV cache allowed), those of options.recompute only (the others
/// go to scratch in `ws`, not allocated per layer; InputError with a tap); with `stats` the layer's norms (and, with
/// no cache, its largest attention logit) are added. The layer's attention window and
/// RoPE are those of its type (ModelConfig::attention_window, rope_parameters of
/// shard.global_layer(layer); docs/architecture.md §3). Throws ShapeError on mismatched
/// shapes, InputError for a KV block outside the pool; CollectiveTimeout if a TP peer
/// never joins. Source: Olmo2DecoderLayer, Olmo2Attention, Olmo2MLP (transformers);
/// Olmo3DecoderLayer, Olmo3Attention (modeling_olmo3.py).
void decoder_layer_forward(const LayerContext& ctx, const LayerWeights& w, int64_t layer, const PackedTokens& packed,
                           const KVCacheBinding* kv, const LayerOptions& options, const TensorView& x,
                           LayerWorkspace& ws, LayerActivations* saved, LayerStats* stats);

/// Scratch tensors one backward reuses across its layers.
struct LayerBackwardWorkspace {
  Tensor dh, ds, dgate, dup, sw, dattn, dq, dk, dv, dxp;
  LayerWorkspace forward;  ///< scratch of a forward rerun (Recompute::Full)
};

/// Fills in the activations of `a` that its forward's mode (a.recompute) dropped, by
/// the forward's own operations in its order on the kept ones, so that they are bit for
/// bit what Recompute::None would have kept (docs/architecture.md §7 "Recomputation"):
/// Selective recomputes qr, kr (QK-norm + RoPE of q0, k0: under TP the same one [T, 2]
/// all-reduce), attn (core attention of qr, kr, v) and x1 (x + the rounded
/// post_attention_layernorm(p)); Full reruns decoder_layer_forward from x keeping the
/// None set (under TP its three all-reduces), `ws` holding its scratch. None: nothing.
/// Afterwards a.recompute is None (the whole set is held; a second call does nothing).
/// Every rank of a TP group must call it with the same mode. `w`, `packed` as the
/// forward's. Throws ShapeError when `a` does not hold its mode's set; CollectiveTimeout
/// if a TP peer never joins. Called by decoder_layer_backward.
void recompute_activations(const LayerContext& ctx, const LayerWeights& w, const PackedTokens& packed,
                           LayerActivations& a, LayerWorkspace& ws);

/// Backward of one layer (no cache), in f32, after recompute_activations has restored
/// what the forward's Recompute mode dropped: the derivative at the activations the
/// forward kept — bf16-valued under bf16 activations, its roundings taken as the
/// identity (down_proj's input is recomputed rounded as the forward rounded it; the
/// attention backward recomputes its probabilities in f32). Given dx [T, h], the gradient at
/// the layer's output, overwrites it with the gradient at the layer's input and
/// ACCUMULATES the layer's parameter gradients into `grads` (same shapes as `w`). Frees
/// `saved`'s tensors as they are used. Under TP the partial input gradients of the
/// column-parallel products are all-reduced (two all-reduces), the QK-norm backward
/// takes one [4, T] all-reduce (parallel::tp_qk_norm_backward); a kv head replicated on
/// several ranks gets a partial k/v/k_norm gradient on each replica (summed later by
/// sum_kv_replica_gradients). Source: the derivative of decoder_layer_forward.
void decoder_layer_backward(const LayerContext& ctx, const LayerWeights& w, LayerWeights& grads,
                            const PackedTokens& packed, LayerActivations& saved, const TensorView& dx,
                            LayerBackwardWorkspace& ws);

}  // namespace olmo2
