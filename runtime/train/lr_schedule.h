// Learning-rate schedules of the OLMo 2 recipe: linear warm-up, then cosine (or linear)
// decay to a floor, or a constant rate (docs/architecture.md §7 "Schedule").
#pragma once

#include <cstdint>
#include <string>

namespace olmo2 {

/// The learning rate of every optimizer step.
///
/// `step` is the 0-based index of the optimizer step being taken (the first update is
/// step 0). Let min = peak_lr · min_lr_ratio.
///
/// Warm-up (step < warmup_steps): lr = peak_lr · (step + 1) / warmup_steps. The "+1" is
/// a deliberate choice: the first update is taken at peak/warmup rather than at lr 0
/// (which would waste a step), and the last warm-up step (step = warmup_steps − 1)
/// reaches exactly peak_lr.
///
/// After warm-up: progress p = (step − warmup_steps) / max(1, total_steps − warmup_steps),
/// clamped to [0, 1] (steps past total_steps stay at the end value), and
///   Cosine:   lr = min + (peak − min) · ½ (1 + cos(π p))
///   Linear:   lr = peak − (peak − min) · p
///   Constant: lr = peak (no warm-up decay; warm-up still applies)
/// so step = warmup_steps gives peak, the midpoint of the decay gives (peak + min)/2 for
/// both decays, and step ≥ total_steps gives min.
struct LrSchedule {
  enum Kind { Cosine, Linear, Constant };

  double peak_lr = 0.0;        ///< peak learning rate (≥ 0)
  int64_t warmup_steps = 0;    ///< linear warm-up length in optimizer steps (≥ 0)
  int64_t total_steps = 0;     ///< steps at which the decay reaches min (≥ warmup_steps)
  double min_lr_ratio = 0.1;   ///< floor as a fraction of peak_lr, in [0, 1]
  Kind kind = Cosine;

  /// The learning rate of optimizer step `step` (0-based; see the struct comment).
  /// Negative steps are treated as step 0. Does not validate: call validate() first.
  double lr(int64_t step) const;

  /// Throws InputError naming the offending value when peak_lr is negative or not
  /// finite, warmup_steps or total_steps is negative, warmup_steps > total_steps, or
  /// min_lr_ratio is outside [0, 1].
  void validate() const;
};

/// "cosine" → Cosine, "linear" → Linear, "constant" → Constant (exact, lower case).
/// Throws InputError naming `name` otherwise.
LrSchedule::Kind parse_schedule(const std::string& name);

/// The name parse_schedule accepts for `kind` ("cosine", "linear", "constant").
const char* schedule_name(LrSchedule::Kind kind);

}  // namespace olmo2
