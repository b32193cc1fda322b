// What one optimizer step of `olmo2 train` did: the values the log line, the JSON log
// and the metrics report (docs/architecture.md §7 training semantics, §9 metrics).
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace olmo2 {

/// What one optimizer step did.
struct StepRecord {
  int64_t step = 0;          ///< 1-based index of the step just taken
  double loss = 0;           ///< cross-entropy, token-weighted mean over the global batch
  double z_loss = 0;         ///< z_coef · mean logsumexp² (the objective is loss + z_loss)
  double grad_norm = 0;      ///< global L2 norm before clipping
  double lr = 0;             ///< learning rate applied
  int64_t tokens = 0;        ///< input tokens seen by the run so far (all steps)
  int64_t target_tokens = 0; ///< non-ignored targets in this step
  double seconds = 0;        ///< wall time of the step
  double tokens_per_second = 0;
  bool skipped = false;      ///< the update was not applied (non-finite, or a spike with --skip-spikes)
  bool loss_spike = false;   ///< the loss spiked (SpikeDetector)
  bool grad_norm_spike = false;  ///< the grad norm spiked
  /// Peak resident memory of the rank that made the record so far, bytes (VmHWM;
  /// rank 0's in the JSON log; docs/architecture.md §7 "Memory plan").
  int64_t peak_rss_bytes = 0;
  /// Where `seconds` went on the rank that made the record (docs/architecture.md §9 "Step
  /// time breakdown"; runtime/train/step_phases.h): seconds blocked in each group's
  /// communication, the pipeline bubble (the pp group's wait) and the rest, computing.
  struct Waits {
    double tp = 0, dp = 0, cp = 0;
  };
  Waits wait;
  double bubble_seconds = 0;
  double compute_seconds = 0;  ///< seconds − every wait − bubble
  /// One object per step for --log-format json: these fields under their own names,
  /// except `seconds`, which is "step_time" (seconds), compute_seconds "compute_time",
  /// bubble_seconds "bubble_time" and `wait` "comm_wait_time": {"tp", "dp", "cp"}
  /// (seconds). Throws nothing.
  nlohmann::json to_json() const;
};

inline nlohmann::json StepRecord::to_json() const {
  return {{"step", step},       {"loss", loss},       {"z_loss", z_loss},
          {"grad_norm", grad_norm}, {"lr", lr},       {"tokens", tokens},
          {"target_tokens", target_tokens}, {"step_time", seconds},
          {"tokens_per_second", tokens_per_second}, {"skipped", skipped},
          {"loss_spike", loss_spike}, {"grad_norm_spike", grad_norm_spike},
          {"peak_rss_bytes", peak_rss_bytes}, {"compute_time", compute_seconds},
          {"bubble_time", bubble_seconds},
          {"comm_wait_time", {{"tp", wait.tp}, {"dp", wait.dp}, {"cp", wait.cp}}}};
}

}  // namespace olmo2
