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
}

void StepPhases::start() {
  for (parallel::TimedCommunicator* t : timers_) {
    if (t) t->reset();
  }
}

void StepPhases::finish(StepRecord& r) const {
  auto seconds = [&](int g) { return timers_[g] ? timers_[g]->total_seconds() : 0.0; };
  r.wait = StepRecord::Waits{seconds(kTp), seconds(kDp), seconds(kCp)};
  r.bubble_seconds = seconds(kPp);
  r.compute_seconds = std::max(0.0, r.seconds - r.wait.tp - r.wait.dp - r.wait.cp - r.bubble_seconds);
}

}  // namespace olmo2
