// Forward and backward of one global batch over every rank of a (tp, pp, dp) layout:
// the target count, the 1F1B pipeline, and the gradient and loss reductions
// (docs/architecture.md §7 (training semantics), §11.4 loss over micro-batches of
// different token counts).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/model/parameters.h"
#include "runtime/train/grad_sync.h"
#include "runtime/train/pipeline_schedule.h"

namespace olmo2 {

/// The communicators of one rank; null members (or groups of one) mean "not split".
struct TrainContext {
  parallel::Communicator* tp = nullptr;
  parallel::Communicator* pp = nullptr;
  parallel::Communicator* dp = nullptr;
  int64_t bucket_bytes = int64_t{25} << 20;  ///< DP gradient all-reduce bucket (see all_reduce_gradients)
  LayerDiagnostics* diag = nullptr;          ///< if set, this rank's stage's forward statistics (not reduced)
  Recompute recompute = Recompute::None;     ///< activations each layer keeps (docs/architecture.md §7 "Recomputation")
  /// ZeRO stages 2 and 3 (runtime/train/zero_shards.h): the units' gathers and gradient
  /// reduce-scatters over dp happen inside the backward, and step 4 below is skipped.
  UnitHooks* hooks = nullptr;
  /// Model chunks per pipeline rank (--pp-virtual; docs/architecture.md §5 "Interleaved
  /// 1F1B"): the model's shard must hold as many (ShardSpec::chunks), Error otherwise.
  int pp_virtual = 1;
  /// Context parallelism (docs/architecture.md §7 "Context parallelism"): each micro-batch's
  /// sequences are split over cp (zigzag rows, ring attention); gradients and loss sums
  /// are summed over cp after dp. The target count is dp's alone (every CP rank counts
  /// the same whole samples). Null or one rank: not split.
  parallel::Communicator* cp = nullptr;
  /// Without hooks: reduce the DP gradient buckets while the backward runs (--overlap on)
  /// or all after it (off); the same bits either way (docs/architecture.md §7 "Overlap").
  bool overlap = true;
  /// With overlap: where the DP buckets live, kept by the caller from step to step (see
  /// GradBuckets); null: allocated each step.
  Tensor* bucket_storage = nullptr;
};

/// The number of counted (non-ignored) targets of the whole global batch: `local`, this
/// rank's DP share's count, summed over `dp` as one i64 all-reduce, exact at any size
/// (an fp32 sum would make 9,000,001 + 9,000,000 into 18,000,000: every count past 2^24
/// could be off). Every rank of `dp` must call it (tp and pp peers hold the same share
/// and count; they need not reduce it). `dp` null or of one rank: `local`. The count
/// travels with a flag for a negative one in the same all-reduce: when any rank's
/// `local` is < 0, every rank throws InputError naming how many and its own value.
/// CollectiveTimeout if a peer never joins. docs/architecture.md §7 (training
/// semantics), §11.4.
int64_t global_target_count(int64_t local, parallel::Communicator* dp);

/// The one place the loss is divided by the global target count: the factor every
/// target's loss gradient is scaled by, loss_scale / global_targets computed in f64 and
/// rounded once to f32 (the training step's gradient scale), so the gradients are those
/// of the token-weighted mean over the whole global batch. 0 for global_targets == 0 (no
/// target: nothing to scale). A non-finite loss_scale gives a non-finite scale (the
/// trainer's non-finite step detection then skips or stops the step). Throws InputError
/// for global_targets < 0, naming the value.
float loss_gradient_scale(double loss_scale, int64_t global_targets);

/// One global batch, of which this rank holds its DP share as `micro_batches`:
///  1. the target count of the share, summed over DP as i64 (global_target_count; the
///     count is reduced, never the per-rank means);
///  2. pipeline_forward_backward with scale loss_gradient_scale(loss_scale, count);
///  3. `inject`, if given, on this rank's local loss sums and gradients (tests inject
///     a non-finite value on one rank here);
///  4. gradients summed over DP in buckets (GradBuckets: with ctx.overlap each bucket is
///     posted inside the backward as soon as its gradients are final, and all are waited
///     for here; a rank that runs `inject` posts its buckets here instead, so that they
///     carry the injected values), then over CP in the same buckets, blocking, and over
///     kv-head replicas on TP (without ctx.hooks: with them each unit's gradient was
///     reduce-scattered in the backward);
///  5. ce_sum and z_sq_sum summed over DP, CP and PP (f64 all-reduces, in that order).
/// Gradients must be zero on entry (they accumulate). Returns the global sums and count
/// on every rank; a count of 0 runs no forward. Collective over tp, pp and dp.
LossSums global_batch_forward_backward(const Olmo2Model& model, std::vector<Parameter>& params, ModelWeights& grads,
                                       const std::vector<std::vector<Sample>>& micro_batches, float z_coef,
                                       double loss_scale, const TrainContext& ctx,
                                       const std::function<void(LossSums&)>& inject = {});

}  // namespace olmo2
