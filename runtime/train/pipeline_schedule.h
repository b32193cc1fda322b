// The 1F1B pipeline schedule of one training step (docs/architecture.md §5 "Pipeline").
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/train/train_step.h"

namespace olmo2 {

/// What the schedule did on this rank's stage (tests check the memory bound with it).
struct PipelineStats {
  int64_t forwards = 0;   ///< micro-batch forwards run
  int64_t backwards = 0;  ///< micro-batch backwards run
  /// Most micro-batches whose activations this stage held at once. 1F1B bounds it by
  /// min(stages − stage, micro-batches), whatever the number of micro-batches.
  int64_t peak_live = 0;
};

/// Forward and backward of every micro-batch of one step on this rank's pipeline stage,
/// in the non-interleaved 1F1B order of PipeDream-Flush / Megatron-LM (Narayanan et al.
/// 2021): stage s of P runs w = min(P − s − 1, M) warm-up forwards, then alternates one
/// forward and one backward until the M forwards are done, then the w remaining
/// backwards. Activations [tokens, hidden] f32 go forward to stage s + 1 and gradients
/// back to s − 1 over `ctx.pp` (tags 1 and 2); where a stage sends one way and receives
/// the other from the same peer it posts both at once (Communicator::send_recv), so
/// no message size can deadlock. Works for any M ≥ 1, including M < P.
///
/// Every rank of the pipeline (and of its TP group) passes the same `micro_batches`
/// (each a list of samples; see forward_backward) and the same `scale` (1 / target count
/// of the whole global batch over all DP ranks: docs/architecture.md §11.4). Gradients are
/// ACCUMULATED into `grads`. Returns the sum of the micro-batches' loss sums on the last stage,
/// zeros on other stages. Without ctx.pp (or with one stage) it is forward_backward per
/// micro-batch. `diag`, `recompute`: see stage_forward (every rank of a TP group passes
/// the same mode). InputError for no micro-batches or a bad sample; CollectiveTimeout when
/// a peer never answers. `hooks` (ZeRO stages 2 and 3) go to every stage_forward and
/// stage_backward.
LossSums pipeline_forward_backward(const Olmo2Model& model, ModelWeights& grads,
                                   const std::vector<std::vector<Sample>>& micro_batches, float z_coef,
                                   float scale, int64_t loss_chunk_tokens = 512, const ParallelContext& ctx = {},
                                   PipelineStats* stats = nullptr, LayerDiagnostics* diag = nullptr,
                                   Recompute recompute = Recompute::None, UnitHooks* hooks = nullptr);

}  // namespace olmo2
