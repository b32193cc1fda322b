// The OLMo 2 decoder (Olmo2ForCausalLM) on one process, CPU backend.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "parallel/communicator.h"
#include "parallel/partition.h"
#include "runtime/model/config.h"

namespace olmo2 {

/// Weights of one decoder layer, f32, HF layout ([out, in]).
struct LayerWeights {
  Tensor q_proj, k_proj, v_proj, o_proj;  ///< [H·hd, h], [KV·hd, h] ×2, [h, H·hd]
  Tensor q_norm, k_norm;                  ///< [H·hd], [KV·hd]
  Tensor gate_proj, up_proj, down_proj;   ///< [I, h] ×2, [h, I]
  Tensor post_attention_layernorm, post_feedforward_layernorm;  ///< [h]
};

/// All weights of the model.
struct ModelWeights {
  Tensor embed_tokens;  ///< [V, h]
  std::vector<LayerWeights> layers;
  Tensor norm;          ///< [h]
  Tensor lm_head;       ///< [V, h]; empty when tied to embed_tokens
};

/// What one rank holds of the model (DESIGN §4); `whole` for a single process.
/// Ranges index the full model: layers, query heads, kv heads, MLP rows, vocab rows
/// of the padded embedding/lm_head (`vocab_real` the real ids among them).
struct ShardSpec {
  parallel::Range layers, q_heads, kv_heads, mlp_rows, vocab_rows, vocab_real;
  bool embedding = true;   ///< stage 0: embed_tokens
  bool final_norm = true;  ///< last stage: model.norm and lm_head
  bool k_counts = true;    ///< this rank contributes its k sum to the QK-norm all-reduce
  int kv_replicas = 1;     ///< TP ranks holding this rank's kv heads (> 1 when KV < tp)
  int kv_replica = 0;      ///< which of them this rank is (0 owns the head; k_counts)
  int64_t padded_vocab = 0;
  /// The whole model on one rank.
  static ShardSpec whole(const ModelConfig& c);
  /// This rank's part of `plan`.
  static ShardSpec from_plan(const parallel::PartitionPlan& plan, int rank);
};

/// The communicators a sharded forward uses; null members mean "not split that way".
struct ParallelContext {
  parallel::Communicator* tp = nullptr;  ///< tensor-parallel group
  parallel::Communicator* pp = nullptr;  ///< pipeline group (stage = pp->rank())
};

/// Keys and values of one sequence for every layer: contiguous [capacity, KV·hd] f32.
/// With a shard: the shard's layers (indexed from its first) and kv heads only.
class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t capacity);
  KVCache(const ModelConfig& config, const ShardSpec& shard, int64_t capacity);
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  const TensorView& keys(int64_t layer) const { return k_[layer].view(); }
  const TensorView& values(int64_t layer) const { return v_[layer].view(); }
  void set_length(int64_t n) { length_ = n; }

 private:
  int64_t length_ = 0, capacity_ = 0;
  std::vector<Tensor> k_, v_;
};

struct ForwardOptions {
  bool last_logits_only = false;  ///< logits of each sequence's last token only
  bool return_hidden = false;     ///< keep every layer's output hidden state
  /// Matrix products by ops::linear_batch_invariant instead of OpenBLAS: a sequence's
  /// results are then bit-identical whatever else is in the batch (serving).
  bool batch_invariant = false;
  /// Under TP, keep each rank's vocab slice of the logits ([rows, vocab_rows.size()],
  /// padding rows included) instead of all-gathering the whole vocabulary.
  bool vocab_parallel_logits = false;
};

class PagedKVCache;

/// A step's sequences for the paged forward: per sequence its new tokens, the number
/// of positions already cached before them, and its block table.
struct PagedBatch {
  std::vector<std::span<const int32_t>> tokens;
  std::vector<int64_t> start;
  std::vector<std::span<const int32_t>> block_tables;
};

struct ForwardResult {
  /// Per sequence: [T_i, V] f32 (or [1, V] with last_logits_only).
  std::vector<Tensor> logits;
  /// hidden[l][i]: output of layer l for sequence i, [T_i, h] (before the final norm).
  std::vector<std::vector<Tensor>> hidden;
};

/// OLMo 2 forward: embedding, per layer QK-normed attention with RoPE and GQA and a
/// SwiGLU MLP, each followed by its post-norm and a residual add, then the final
/// norm and lm_head. Source: transformers' modeling_olmo2.py (DESIGN §2). With a bf16
/// checkpoint the fp32 kernels round activations to bf16 where the reference stores
/// them in bf16.
class Olmo2Model {
 public:
  /// Loads config.json and the safetensors weights of `dir`. Throws InputError when a
  /// tensor is missing (norm weights are never defaulted), has the wrong shape or an
  /// unsupported dtype, or the config is invalid.
  static Olmo2Model load(const std::string& dir);

  /// Loads only `shard`'s slices of the weights (rows of column-parallel weights,
  /// columns of row-parallel ones, the stage's layers), reading only those bytes.
  static Olmo2Model load(const std::string& dir, const ShardSpec& shard);

  /// A model with N(0, std²) weights from a fixed-seed generator and unit norm
  /// weights, built in memory (benchmarks, tests).
  static Olmo2Model random(const ModelConfig& config, uint64_t seed, float std = 0.02f);

  /// A model holding `weights` (f32, the shapes `shard` implies; not checked here) —
  /// how training builds the model it initialised or loaded.
  static Olmo2Model from_weights(const ModelConfig& config, const ShardSpec& shard,
                                 ModelWeights weights);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  /// Writable weights, for the optimizer.
  ModelWeights& mutable_weights() { return weights_; }
  /// dtype activations are rounded to (bf16 for a bf16 checkpoint, else f32).
  DType activation_dtype() const { return act_; }

  /// Forward over a batch of sequences of different lengths (no padding: tokens of all
  /// sequences are packed for the matrix products; attention is per sequence).
  /// Throws InputError for an empty sequence or an id outside [0, vocab_size).
  ForwardResult forward(const std::vector<std::vector<int32_t>>& batch,
                        const ForwardOptions& options = {}) const;

  /// Incremental forward: tokens[i] are appended to caches[i] (positions continue from
  /// caches[i]->length()) and attend to every cached token. Throws InputError when a
  /// cache would overflow its capacity.
  ForwardResult forward(const std::vector<std::span<const int32_t>>& tokens,
                        const std::vector<KVCache*>& caches, const ForwardOptions& options) const;

  /// Sharded forward: every rank of the TP and PP groups calls it with the same
  /// tokens. Stage 0 embeds (vocab-parallel: each rank its rows, one all-reduce), each
  /// layer does column-parallel q/k/v/gate/up, the whole-projection QK-norm by one
  /// [T, 2] all-reduce, row-parallel o/down with an all-reduce; stages pass the hidden
  /// states [T, h] by send/recv. The last stage returns the full logits (vocab slices
  /// all-gathered over TP, padding dropped); other stages return no logits. `hidden`
  /// holds this stage's layers only.
  ForwardResult forward(const std::vector<std::span<const int32_t>>& tokens,
                        const std::vector<KVCache*>& caches, const ForwardOptions& options,
                        const ParallelContext& ctx) const;

  /// Forward over the paged KV cache (serving): every sequence's new tokens are written
  /// into `cache` through its block table (positions start … start+n−1) and attend to
  /// everything cached before them (ops::paged_attention). Sharded as the forward
  /// above when `ctx` has groups. Throws ShapeError for a block table too short,
  /// InputError for an empty sequence, an id outside the vocabulary or a position past
  /// max_position_embeddings.
  ForwardResult forward_paged(const PagedBatch& batch, const PagedKVCache& cache, const ForwardOptions& options,
                              const ParallelContext& ctx) const;

  const ShardSpec& shard() const { return shard_; }

  /// Model FLOPs of a forward over `tokens` new tokens attending to `context` positions
  /// on average: 2·(matrix-product parameters)·tokens + attention 4·tokens·context·H·hd
  /// per layer. The MFU numerator used by the benchmark.
  double forward_flops(int64_t tokens, double context) const;

 private:
  /// Writes layer `layer`'s new keys/values and computes attention into `out` for the
  /// packed rows (sequence i owns rows offset[i] … offset[i+1]−1).
  using AttendFn = std::function<void(size_t layer, const std::vector<int64_t>& offset, const TensorView& q,
                                      const TensorView& k, const TensorView& v, const TensorView& out)>;
  /// The body every forward shares; start[i] = positions cached before tokens[i].
  ForwardResult forward_core(const std::vector<std::span<const int32_t>>& tokens, const std::vector<int64_t>& start,
                             const AttendFn& attend, const ForwardOptions& options,
                             const ParallelContext& ctx) const;

  ModelConfig config_;
  ShardSpec shard_;
  ModelWeights weights_;
  DType act_ = DType::F32;
};

}  // namespace olmo2
