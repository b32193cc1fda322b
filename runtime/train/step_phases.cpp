#include "runtime/train/step_phases.h"

#include <algorithm>
#include <memory>

namespace olmo2 {

namespace {
/// The TimedCommunicator in `c`, wrapping it first when it is not one; null for null.
parallel::TimedCommunicator* timed(std::unique_ptr<parallel::Communicator>& c) {
  if (!c) return nullptr;
  if (auto* t = dynamic_cast<parallel::TimedCommunicator*>(c.get())) return t;
  auto t = std::make_unique<parallel::TimedCommunicator>(std::move(c));
  parallel::TimedCommunicator* raw = t.get();
  c = std::move(t);
  return raw;
}
}  // namespace

StepPhases::StepPhases(parallel::ProcessGroups* groups) {
  if (!groups) return;
  timers_[kTp] = timed(groups->tp), timers_[kDp] = timed(groups->dp), timers_[kPp] = timed(groups->pp);
  timers_[kCp] = timed(groups->cp);
}

void StepPhases::start() {
  for (size_t g = 0; g < kGroups; ++g) at_start_[g] = timers_[g] ? timers_[g]->total_seconds() : 0.0;
}

double StepPhases::since_start(int group) const {
  const size_t g = static_cast<size_t>(group);
  return timers_[g] ? timers_[g]->total_seconds() - at_start_[g] : 0.0;
}

void StepPhases::finish(StepRecord& r) const {
  r.wait = StepRecord::Waits{since_start(kTp), since_start(kDp), since_start(kCp)};
  r.bubble_seconds = since_start(kPp);
  r.compute_seconds = std::max(0.0, r.seconds - r.wait.tp - r.wait.dp - r.wait.cp - r.bubble_seconds);
}

}  // namespace olmo2
