// The OLMo 2 model (Olmo2ForCausalLM): its weights (whole or one rank's shard) and its
// forward, which runs the decoder layers of runtime/model/decoder_layer.h.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "parallel/communicator.h"
#include "parallel/partition.h"
#include "runtime/model/config.h"
#include "runtime/model/decoder_layer.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/precision.h"
#include "runtime/model/quantized_weights.h"
#include "runtime/model/shard_spec.h"
#include "runtime/model/token_batch.h"
#include "runtime/model/weights.h"

namespace olmo2 {

/// What a forward returns and how it computes.
struct ForwardOptions {
  bool last_logits_only = false;  ///< logits of each sequence's last token only
  bool return_hidden = false;     ///< keep every layer's output hidden state
  /// Matrix products by ops::linear_batch_invariant and attention over the KV cache by
  /// ops::paged_attention: a sequence's results are then bit-identical whatever else is
  /// in the batch (serving).
  bool batch_invariant = false;
  /// Under TP, keep each rank's vocab slice of the logits ([rows, vocab_rows.size()],
  /// padding rows included) instead of all-gathering the whole vocabulary.
  bool vocab_parallel_logits = false;
  /// With last_logits_only: the sequences (by index in the batch; empty: none) that
  /// still get the logits of every row — prompt logprobs in serving. Under
  /// batch_invariant the other sequences' logits are the same bits as without them.
  std::vector<bool> all_logits;
  /// Reads and changes named activations at every TapSite of this rank's part of the
  /// forward (docs/architecture.md §13): token_embeddings on stage 0, each local layer's
  /// sites, final_norm_output and lm_head_output (the rows that get logits, this rank's
  /// vocab rows before any gather) on the last stage. Null: none.
  ForwardTap* tap = nullptr;
  /// On the last stage, whether each sequence's rows that get logits came out of the
  /// final norm finite (ForwardResult::nonfinite): a NaN or infinity anywhere upstream
  /// (an intervention that overflows the residual, a broken checkpoint) reaches them.
  /// One per-row sum of squares and a copy of R floats to the host.
  bool check_finite = false;
};

/// The logits (and optionally hidden states) of a forward.
struct ForwardResult {
  /// Per sequence: [T_i, V] f32 (or [1, V] with last_logits_only, unless all_logits[i]).
  std::vector<Tensor> logits;
  /// hidden[l][i]: output of layer l for sequence i, [T_i, h] (before the final norm).
  std::vector<std::vector<Tensor>> hidden;
  /// With check_finite, on the last stage: per sequence, 1 when one of its rows that got
  /// logits is not finite after the final norm (the logits are then garbage).
  std::vector<uint8_t> nonfinite;
};

/// OLMo 2 forward: embedding, per layer QK-normed attention with RoPE and GQA and a
/// SwiGLU MLP, each followed by its post-norm and a residual add, then the final
/// norm and lm_head. Source: transformers' modeling_olmo2.py (docs/architecture.md §3). With a bf16
/// checkpoint the fp32 kernels round activations to bf16 where the reference stores
/// them in bf16.
class Olmo2Model {
 public:
  /// Loads config.json and the safetensors weights of `dir`, in the checkpoint's
  /// default precision (bf16 for a bf16 checkpoint, else fp32). Throws InputError when a
  /// tensor is missing (norm weights are never defaulted), has the wrong shape or an
  /// unsupported dtype, or the config is invalid.
  static Olmo2Model load(const std::string& dir);

  /// Loads only `shard`'s slices of the weights (rows of column-parallel weights,
  /// columns of row-parallel ones, the stage's layers), reading only those bytes, held in
  /// `precision`'s weight dtype (default: the checkpoint's, see default_precision): a
  /// bf16 checkpoint in bf16 is kept as loaded; each tensor's pages of the file mapping
  /// are dropped once copied, so the weights are resident once. On `device` CUDA each
  /// tensor is read into host memory in the weight dtype, copied to the current GPU
  /// (ops::copy) and its host copy freed before the next is read: the weights are
  /// resident on the GPU only. Throws Error when the device is out of memory.
  /// With `quantization` (CPU only: InputError on another device, and as
  /// check_quantization for a group that does not fit the shard) each decoder layer's
  /// linear weights are quantized as soon as the layer is read and their dense tensors
  /// freed, and the lm_head is quantized to int8 per channel (quantize_layer,
  /// quantize_lm_head): the weights are resident in the quantized format, with one
  /// layer dense at a time on top while loading.
  static Olmo2Model load(const std::string& dir, const ShardSpec& shard,
                         std::optional<Precision> precision = std::nullopt, Device device = Device::CPU,
                         std::optional<WeightQuantization> quantization = std::nullopt);

  /// A model with N(0, std²) weights, a function of `seed` (fill_normal: vectorised and
  /// threaded, the 1B shape in seconds), and unit norm weights, built in memory
  /// (benchmarks, tests), held in `precision`'s weight dtype.
  static Olmo2Model random(const ModelConfig& config, uint64_t seed, float std = 0.02f,
                           Precision precision = Precision::FP32);

  /// A model holding `weights` (the shapes `shard` implies, in `precision`'s weight
  /// dtype; not checked here) — how training builds the model it initialised or loaded.
  /// Its device is the weights' (their first non-empty tensor's; CPU when none).
  static Olmo2Model from_weights(const ModelConfig& config, const ShardSpec& shard, ModelWeights weights,
                                 Precision precision = Precision::FP32);

  /// Quantizes the weights as load's `quantization` does (tests, benchmarks, a random
  /// model). InputError on a model that is already quantized, not on the CPU, or whose
  /// shard the group does not fit.
  void quantize(const WeightQuantization& quantization);
  /// How the weights are quantized (the group resolved); nullopt when they are dense.
  const std::optional<WeightQuantization>& quantization() const { return quantization_; }

  const ModelConfig& config() const { return config_; }
  /// Adds generation_config.json's eos ids to the ids generation stops at
  /// (ModelConfig::add_generation_eos_token_ids; docs/architecture.md §8).
  void add_generation_eos_token_ids(const std::vector<int64_t>& ids) { config_.add_generation_eos_token_ids(ids); }
  const ModelWeights& weights() const { return weights_; }
  /// Writable weights, for the optimizer.
  ModelWeights& mutable_weights() { return weights_; }
  /// The precision the model computes in (docs/architecture.md §3.2).
  Precision precision() const { return precision_; }
  /// Where its weights live, and where its forward keeps activations, scratch and
  /// logits (docs/architecture.md §2): token ids and positions are copied there.
  Device device() const { return device_; }
  /// dtype activations are rounded to: bf16 in bf16 precision, else f32 (no rounding).
  DType activation_dtype() const { return activation_dtype_of(precision_); }

  /// Forward over whole sequences without a KV cache (evaluation, tests): a
  /// TokenBatch of `batch` with every start 0. Throws as the forward below.
  ForwardResult forward(const std::vector<std::vector<int32_t>>& batch, const ForwardOptions& options = {},
                        const ParallelContext& ctx = {}) const;

  /// The forward. Every rank of the TP and PP groups calls it with the same batch.
  /// `cache` must lie on device(); the logits (and hidden states) are on device().
  /// Without `cache` each sequence attends to its own tokens (batch.start all 0); with
  /// one, sequence i's new tokens take positions start[i] … and are written into
  /// `cache` through block_tables[i] before attending to everything cached (a
  /// contiguous cache: KVCache::contiguous with consecutive blocks). Stage 0 embeds
  /// (vocab-parallel under TP: each rank its rows, one all-reduce), each layer runs
  /// decoder_layer_forward, stages pass the hidden states [T, h] by send/recv; the last
  /// stage applies the final norm and lm_head and returns the logits (vocab slices
  /// all-gathered over TP, padding dropped, unless vocab_parallel_logits); other stages
  /// return no logits. `hidden` holds this stage's layers only. Activations are
  /// rounded to activation_dtype(). Throws InputError for an empty sequence, an id
  /// outside the vocabulary, a position past max_position_embeddings, a KV block outside
  /// the pool; ShapeError for a block table too short.
  ForwardResult forward(const TokenBatch& batch, const KVCache* cache, const ForwardOptions& options,
                        const ParallelContext& ctx = {}) const;

  /// This rank's layers over the packed rows: x [T, h] f32 (the stage's input) becomes
  /// the stage's output. What the forward above and the training step share. `saved`
  /// (one entry per local layer) keeps the activations for a backward, `stats` adds the
  /// layers' statistics, `hidden` receives a copy of x after each layer.
  void forward_layers(const PackedTokens& packed, const KVCacheBinding* kv, const LayerOptions& options,
                      const TensorView& x, const ParallelContext& ctx, std::vector<LayerActivations>* saved,
                      std::vector<LayerStats>* stats, std::vector<Tensor>* hidden) const;

  /// This stage's input rows [T, h] f32 on device(): the (vocab-parallel) embedding of
  /// packed.ids on stage 0, else received from the previous pipeline stage.
  Tensor stage_input(const PackedTokens& packed, const ParallelContext& ctx) const;

  /// The context its layers need (the TP and CP groups when they have more than one rank).
  LayerContext layer_context(const ParallelContext& ctx) const {
    return LayerContext{config_, shard_, ctx.tensor_parallel(), ctx.context_parallel()};
  }

  const ShardSpec& shard() const { return shard_; }

  /// Model FLOPs of a forward over `tokens` new tokens attending to `context` positions
  /// on average: 2·(matrix-product parameters)·tokens + attention 4·tokens·context·H·hd
  /// per layer. The MFU numerator used by the benchmark.
  double forward_flops(int64_t tokens, double context) const;

 private:
  ModelConfig config_;
  ShardSpec shard_;
  ModelWeights weights_;
  Precision precision_ = Precision::FP32;
  Device device_ = Device::CPU;
  std::optional<WeightQuantization> quantization_;
};

}  // namespace olmo2
