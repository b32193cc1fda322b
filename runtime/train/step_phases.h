// Where a training step's wall time goes on one rank: computing, waiting on each process
// group's communication, idle in the pipeline bubble (docs/architecture.md §9 "Step time
// breakdown").
#pragma once

#include <array>

#include "parallel/process_groups.h"
#include "parallel/timed_communicator.h"
#include "runtime/train/step_record.h"

namespace olmo2 {

/// Times the tp, dp, pp and cp communicators of `groups` per step. The constructor wraps each
/// in a parallel::TimedCommunicator (unless it already is one, e.g. a benchmark's), so
/// that every call and every handle's test() and wait() on it is timed: the seconds this
/// rank spent blocked in that group. The world communicator (a few votes per step) is
/// not timed; its calls count as compute. Without groups (one process) everything is
/// compute. Not thread-safe.
class StepPhases {
 public:
  /// `groups` may be null; it must outlive this object.
  explicit StepPhases(parallel::ProcessGroups* groups);
  /// Notes the timers' totals: call at the start of a step. (The timers are not reset, so
  /// a benchmark that wrapped the groups keeps its own totals.)
  void start();
  /// Fills r.wait (tp, dp, cp: seconds blocked in that group's calls since start()),
  /// r.bubble_seconds (the pp group's, see below) and r.compute_seconds = r.seconds − all
  /// of them (never below 0). On a CPU a stage blocked on a pipeline message is idle
  /// because its peer stage is still computing: that wait is the pipeline bubble, and is
  /// not listed again as a pp wait.
  void finish(StepRecord& r) const;

 private:
  enum { kTp, kDp, kPp, kCp, kGroups };
  double since_start(int group) const;
  std::array<parallel::TimedCommunicator*, kGroups> timers_{};
  std::array<double, kGroups> at_start_{};
};

}  // namespace olmo2
