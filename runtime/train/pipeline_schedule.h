// The 1F1B pipeline schedule of one training step (docs/architecture.md §5 "Pipeline").
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/train/train_step.h"

namespace olmo2 {

/// What the schedule did on this rank's stage (tests check the memory bound with it).
struct PipelineStats {
  int64_t forwards = 0;   ///< micro-batch forwards run (one per model chunk)
  int64_t backwards = 0;  ///< micro-batch backwards run (one per model chunk)
  /// Most (micro-batch, model chunk) activations this stage held at once. Plain 1F1B
  /// bounds it by min(stages − stage, micro-batches), whatever the number of
  /// micro-batches; the interleaved schedule by its warm-up + 1 (docs/architecture.md §5).
  int64_t peak_live = 0;
  /// Wall seconds the schedule spent blocked on pipeline messages (waiting for a
  /// receive to arrive or a send to be taken): on a CPU the stage is idle then because
  /// its peer is still computing — the pipeline bubble (docs/architecture.md §9).
  double idle_seconds = 0;
};

/// One operation of a stage's schedule: the forward or backward of micro-batch
/// `micro_batch` through model chunk `chunk`.
struct ScheduleOp {
  bool forward = true;
  int64_t micro_batch = 0;
  int chunk = 0;
  bool operator==(const ScheduleOp&) const = default;
};

/// The order in which stage `stage` of `stages` runs its operations for `micro_batches`
/// micro-batches over `chunks` model chunks per stage. chunks = 1: plain 1F1B
/// (PipeDream-Flush; w = min(P − s − 1, M) warm-up forwards, then one forward and one
/// backward alternately, then w backwards). chunks = V > 1: Megatron-LM's interleaved
/// 1F1B (Narayanan et al. 2021, section 2.2): the k-th forward is micro-batch
/// ⌊k / (P·V)⌋·P + k mod P through chunk ⌊k / P⌋ mod V, the k-th backward the same
/// micro-batch through chunk V − 1 − ⌊k / P⌋ mod V, with w = min(2·(P − s − 1) +
/// (V − 1)·P, M·V) warm-up forwards. Each chunk's forwards and backwards run in
/// micro-batch order. InputError for M < 1, or for V > 1 when M is not a multiple of P
/// (naming both).
std::vector<ScheduleOp> pipeline_schedule(int stages, int stage, int chunks, int64_t micro_batches);

/// Forward and backward of every micro-batch of one step on this rank's pipeline stage,
/// in the order of pipeline_schedule: plain 1F1B when the model holds one chunk
/// (ShardSpec::chunks), the interleaved 1F1B with V chunks (docs/architecture.md §5
/// "Interleaved 1F1B"). Activations [tokens, hidden] f32 go to the next virtual stage and
/// gradients back to the previous one over `ctx.pp` (tags 1 + 2c and 2 + 2c into chunk c).
/// On the CPU each send is posted at once (Communicator::send_start) and waited for at the
/// end of the step (so the sent tensors live until then), so a stage blocks only on an
/// input not yet arrived (its receive); on a device transport the calls block, a send and the next receive
/// from the same peer posted together (send_recv) so no message size can deadlock (there
/// V > 1 is an InputError). The arithmetic is that of plain 1F1B whatever the order:
/// every chunk's micro-batches run in order 0…M−1, so losses and gradients are bit-identical.
/// Plain 1F1B works for any M ≥ 1, including M < P.
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
