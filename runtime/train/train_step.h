// One micro-batch of OLMo 2 training on one process: the forward that keeps the
// activations the backward needs, the fused cross-entropy + Z-loss, and the backward
// through every layer into the parameter gradients (docs/architecture.md §7).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/train/data_loader.h"
#include "runtime/model/model.h"

namespace olmo2 {

/// Loss sums of one micro-batch; none is divided by anything, so micro-batches (and
/// later DP ranks) add up and the caller divides once by the global token count
/// (docs/architecture.md §11.4: never average averages).
struct LossSums {
  double ce_sum = 0.0;    ///< Σ over counted targets of −log softmax(logits)[target]
  double z_sq_sum = 0.0;  ///< Σ over counted targets of logsumexp(logits)² (not × coefficient)
  int64_t count = 0;      ///< number of targets that are not kIgnoreIndex
  LossSums& operator+=(const LossSums& o) {
    ce_sum += o.ce_sum, z_sq_sum += o.z_sq_sum, count += o.count;
    return *this;
  }
};

/// The device of the model's weights (the first tensor this rank holds): where a step
/// puts its token ids, activations, gradients at stage boundaries and scratch.
Device weights_device(const Olmo2Model& model);

/// Number of targets of `samples` that are not kIgnoreIndex.
int64_t count_targets(const std::vector<Sample>& samples);

/// What one pipeline stage keeps of one micro-batch from its forward to its backward:
/// the packed tokens, every layer's activations (see forward_backward) and, on the last
/// stage, the gradient at its last layer's output. Opaque; owned through StageForward.
struct StageActivations;
/// Deletes a StageActivations (its type is complete only in train_step.cpp).
struct StageActivationsDeleter {
  void operator()(StageActivations* p) const;
};
using StageActivationsPtr = std::unique_ptr<StageActivations, StageActivationsDeleter>;

/// Forward statistics of this stage's layers, summed over the micro-batches given to
/// stage_forward (monitoring: docs/architecture.md §9). Index = layer of the stage (0 = its first).
struct LayerDiagnostics {
  std::vector<double> output_norm_sum;     ///< Σ over tokens of ‖residual stream after the block‖₂
  std::vector<double> attention_norm_sum;  ///< Σ over tokens of ‖post-norm attention output‖₂
  std::vector<double> mlp_norm_sum;        ///< Σ over tokens of ‖post-norm MLP output‖₂
  std::vector<float> attention_logit_max;  ///< max over tokens, this rank's heads and keys of q·k/√head_dim
  int64_t tokens = 0;                      ///< tokens the sums run over
  /// Zeros for `layers` layers (logit maxima at −∞).
  void reset(size_t layers);
};

/// Per-unit callbacks of a step whose weights or gradients are not all held whole (ZeRO
/// stages 2 and 3: runtime/train/zero_shards.h; docs/architecture.md §7 "ZeRO stages").
/// Units of a stage: 0 the embedding (first stage), 1 + l its layer l, 1 + layers the
/// final norm and lm_head (last stage). before_forward(u) makes unit u's weights
/// readable, after_forward(u) lets them go; before_backward(u) makes its weights
/// readable (not needed for the embedding) and its gradient tensors zeros to accumulate
/// into; after_backward(u) takes the gradient away (and lets the weights go). The last
/// stage's tail runs its backward inside the forward: before_forward, before_backward,
/// after_backward, after_forward. Without hooks every tensor is always there.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(int unit) = 0;
  virtual void after_forward(int unit) = 0;
  virtual void before_backward(int unit) = 0;
  virtual void after_backward(int unit) = 0;
  /// Called once after the step's last backward (global_batch_forward_backward):
  /// completes what the hooks left in flight (reductions overlapped with the backward,
  /// docs/architecture.md §7 "Overlap"). Default: nothing.
  virtual void finish() {}
  /// Where the step's tensors live (the weights' device, which a released tensor keeps).
  virtual Device device() const = 0;
};

/// Result of stage_forward.
struct StageForward {
  LossSums sums;  ///< last stage: the micro-batch's loss sums; zeros elsewhere
  Tensor output;  ///< not the last stage: this stage's output [tokens, hidden] f32, for the next stage
  StageActivationsPtr saved;  ///< for stage_backward; null without grads
};

/// Forward of one micro-batch through this rank's pipeline stage (the layers of
/// model.shard()). Stage 0 embeds `samples`' ids; later stages take `input`, the previous
/// stage's output, [tokens, hidden] f32 with tokens = Σ sample lengths (ShapeError
/// otherwise). Every stage needs the samples (positions and sequence boundaries; the last
/// stage the labels). The last stage also runs the final norm, lm_head and loss and —
/// when `grads` is given — their backward at once (scale as in forward_backward), so its
/// StageForward holds the loss sums and the gradient at its last layer's output; other
/// stages return their output. With `grads` null nothing is kept (evaluation).
/// TP collectives as in forward_backward. InputError for a bad sample, or a model with
/// tied embeddings split over pipeline stages. Source: Megatron-LM's pipeline stage
/// split of the transformer; the math is forward_backward's.
/// With `diag` (reset to the stage's layer count) the per-layer norms and the largest
/// attention logit are added to it (the logit costs one more pass over q·kᵀ).
/// `recompute`: which activations each layer keeps for stage_backward, which recomputes
/// the rest (runtime/model/decoder_layer.h Recompute; docs/architecture.md §7
/// "Recomputation"): losses and gradients are bit-identical in every mode.
/// With `hooks` each unit is bracketed by its calls (see UnitHooks); the arithmetic is
/// the same.
/// `model_chunk`: which of the rank's model chunks (ShardSpec::chunks; 0 unless the
/// interleaved schedule gave it several) runs — its layers only; the embedding only
/// in chunk 0 of the first stage, the tail only in the last chunk of the last stage
/// (docs/architecture.md §5 "Interleaved 1F1B"). stage_backward runs the chunk its
/// StageActivations came from. Error when model_chunk is not a chunk of the shard.
/// Context parallelism (ctx.cp with more than one rank; docs/architecture.md §7 "Context
/// parallelism"): the stage runs on this CP rank's zigzag rows of the samples only (tokens
/// = Σ lengths / cp, each length a multiple of 2·cp, else InputError), at their positions
/// in the whole sequences, with ring attention over ctx.cp; the loss sums are this rank's
/// rows' (the caller sums them over cp). Every rank of ctx.cp must call it alike.
StageForward stage_forward(const Olmo2Model& model, ModelWeights* grads, const std::vector<Sample>& samples,
                           const Tensor& input, float z_coef, float scale, int64_t loss_chunk_tokens = 512,
                           const ParallelContext& ctx = {}, LayerDiagnostics* diag = nullptr,
                           Recompute recompute = Recompute::None, UnitHooks* hooks = nullptr, int model_chunk = 0);

/// Backward of one micro-batch through this rank's stage: `grad_output` is the gradient
/// at the stage's output received from the next stage ([tokens, hidden] f32; ignored on
/// the last stage, which kept its own). Accumulates the stage's parameter gradients into
/// `grads` and returns the gradient at the stage's input for the previous stage (an
/// empty tensor on stage 0, which adds it into the embedding gradient). Frees `saved`'s
/// activations as it goes. ShapeError when grad_output has the wrong shape. `hooks`: as
/// for stage_forward, around each layer's and the embedding's backward.
Tensor stage_backward(const Olmo2Model& model, ModelWeights& grads, StageActivations& saved,
                      const Tensor& grad_output, const ParallelContext& ctx = {}, UnitHooks* hooks = nullptr);

/// Forward and backward of one micro-batch. `samples` may have different lengths
/// (each ≥ 1 token; labels the same length as input_ids, −100 for "no target"). Runs
/// the f32 forward of Olmo2Model (transformers' modeling_olmo2.py) keeping per layer
/// its input, the q/k projections before and after QK-norm + RoPE, v, the attention
/// output, the o/down projections before their post-norms, the residual after
/// attention and the gate/up projections; then computes per token
///   ℓ_t = CE_t + z_coef·logsumexp_t²
/// and back-propagates scale·Σ_t ℓ_t. Gradients are ACCUMULATED into `grads` (same
/// structure as model.weights(); see zeros_like_weights), so micro-batches add up;
/// pass scale = 1/(target count of the whole global batch). The lm_head and loss run
/// in chunks of `loss_chunk_tokens` rows so the [tokens, vocab] logits never exist
/// whole.
///
/// Tensor parallel (`ctx.tp` with more than one rank; the model loaded with a TP
/// ShardSpec holding every layer): vocab-parallel embedding (one all-reduce);
/// column-parallel q/k/v/gate/up and row-parallel o/down (an all-reduce of each
/// row-parallel output forward, and of the partial input gradient of each block's
/// column-parallel products backward — two per layer each way); the whole-projection
/// QK-norm with one [T, 2] all-reduce forward and one [T, 4] (Σx², Σg·w·x for q and k)
/// backward; vocab-parallel lm_head and cross-entropy (parallel/vocab_parallel_loss.h)
/// with an all-reduce of d(normed hidden). Sharded parameters get their slice's
/// gradient; replicated ones (post-norms, final norm) the full, identical gradient on
/// every rank. A kv head replicated on several TP ranks (KV < tp) gets on each replica a
/// partial k/v/k_norm gradient (from its own query heads); sum_kv_replica_gradients
/// (runtime/train/grad_sync.h) adds them up. Needs every layer on this rank (pipeline stages:
/// runtime/train/pipeline_schedule.h). Throws InputError for an empty
/// sample, mismatched labels, or an id/label outside the vocabulary (naming it);
/// ShapeError when `grads` does not match the model. `recompute`: as stage_forward's
/// (the same bits in every mode, less memory kept between the forward and the backward).
LossSums forward_backward(const Olmo2Model& model, ModelWeights& grads,
                          const std::vector<Sample>& samples, float z_coef, float scale,
                          int64_t loss_chunk_tokens = 512, const ParallelContext& ctx = {},
                          Recompute recompute = Recompute::None);

/// The same loss sums without a backward (evaluation, finite-difference checks).
LossSums compute_loss(const Olmo2Model& model, const std::vector<Sample>& samples, float z_coef,
                      const ParallelContext& ctx = {});

}  // namespace olmo2
