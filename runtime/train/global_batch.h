// Forward and backward of one global batch over every rank of a (tp, pp, dp) layout:
// the target count, the 1F1B pipeline, and the gradient and loss reductions (DESIGN §5).
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
};

/// One global batch, of which this rank holds its DP share as `micro_batches`:
///  1. the target count of the share, summed over DP (case C4: the count is reduced,
///     never the per-rank means);
///  2. pipeline_forward_backward with scale loss_scale / (global count);
///  3. `inject`, if given, on this rank's local loss sums and gradients (tests inject
///     a non-finite value on one rank here);
///  4. gradients summed over DP in buckets, and over kv-head replicas on TP;
///  5. ce_sum and z_sq_sum summed over DP and PP (fp32 hi/lo pairs, ~48 bits).
/// Gradients must be zero on entry (they accumulate). Returns the global sums and count
/// on every rank; a count of 0 runs no forward. Collective over tp, pp and dp.
LossSums global_batch_forward_backward(const Olmo2Model& model, std::vector<Parameter>& params, ModelWeights& grads,
                                       const std::vector<std::vector<Sample>>& micro_batches, float z_coef,
                                       double loss_scale, const TrainContext& ctx,
                                       const std::function<void(LossSums&)>& inject = {});

}  // namespace olmo2
