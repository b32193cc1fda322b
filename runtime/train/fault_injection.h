// Faults `olmo2 train` injects on request, for tests only: a loss spike or a non-finite
// loss at one step (--debug-scale-loss STEP:FACTOR), on every rank or on one
// (--debug-scale-rank), and a stop as if SIGTERM arrived (--debug-stop-after). They
// exercise the non-finite guard, the spike detector and exact resume
// (docs/architecture.md §7 training semantics, §10 tests and fixtures).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/model/parameters.h"
#include "runtime/train/train_options.h"
#include "runtime/train/train_step.h"

namespace olmo2 {

/// The debug options of one run, and the answers the Trainer asks of them. Without
/// those options every answer is "no fault": factor 1, no injection, no stop.
class FaultInjection {
 public:
  /// Keeps --debug-scale-loss, --debug-scale-rank and --debug-stop-after of `options`
  /// (validate() has checked them on their own).
  explicit FaultInjection(const TrainOptions& options);

  /// Throws InputError when --debug-scale-rank names no rank of a job of `world` ranks
  /// (an injection that never happens would let a test pass for the wrong reason).
  void check_rank(int world) const;

  /// What multiplies the loss (and, through the backward's scale, the gradients) of
  /// the 1-based step `step` on every rank: FACTOR at STEP when no rank is singled out,
  /// else 1. Unitless; may be nan or inf.
  double loss_factor(int64_t step) const;

  /// The injection for the 1-based step `step` on world rank `rank`: at STEP, on the
  /// rank --debug-scale-rank names, multiplies this rank's local loss sums and the
  /// gradients of `params` (after the backward, before any reduction) by FACTOR, so
  /// that one rank alone sees a non-finite value and the world vote must catch it.
  /// With a planted gradient error (TrainOptions::debug_grad_error) on this rank, also
  /// adds it to `params`' gradients at every step. Empty otherwise. `params` must
  /// outlive the returned function.
  std::function<void(LossSums&)> injection(int64_t step, int rank, const std::vector<Parameter>& params) const;

  /// True when the run must stop, as on SIGTERM, now that `steps_done` steps are done
  /// (--debug-stop-after; 0 never stops, as a run stops only after a step).
  bool stop_after(int64_t steps_done) const { return steps_done == stop_after_; }

 private:
  int64_t scale_step_ = -1;     ///< --debug-scale-loss STEP (-1: none)
  double scale_factor_ = 1.0;   ///< --debug-scale-loss FACTOR
  int scale_rank_ = -1;         ///< --debug-scale-rank (-1: every rank, to the loss)
  int64_t stop_after_ = 0;      ///< --debug-stop-after (0: off)
  double grad_error_ = 0.0;     ///< TrainOptions::debug_grad_error (0: off)
  int grad_error_rank_ = -1;    ///< TrainOptions::debug_grad_error_rank
};

}  // namespace olmo2
