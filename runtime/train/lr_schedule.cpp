#include "runtime/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace olmo2 {

double LrSchedule::lr(int64_t step) const {
  step = std::max<int64_t>(step, 0);
  if (step < warmup_steps) {
    return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (kind == Constant) return peak_lr;
  const double min_lr = peak_lr * min_lr_ratio;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double p = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  if (kind == Linear) return peak_lr - (peak_lr - min_lr) * p;
  return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

void LrSchedule::validate() const {
  if (!(peak_lr >= 0.0) || !std::isfinite(peak_lr)) {
    OLMO2_THROW(InputError, "learning rate ", peak_lr, " must be a finite number >= 0");
  }
  if (warmup_steps < 0) OLMO2_THROW(InputError, "warm-up steps ", warmup_steps, " must be >= 0");
  if (total_steps < 0) OLMO2_THROW(InputError, "total steps ", total_steps, " must be >= 0");
  if (warmup_steps > total_steps) {
    OLMO2_THROW(InputError, "warm-up steps ", warmup_steps, " exceed the total steps ", total_steps);
  }
  if (!(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0)) {
    OLMO2_THROW(InputError, "minimum learning-rate ratio ", min_lr_ratio, " must be in [0, 1]");
  }
  if (kind != Cosine && kind != Linear && kind != Constant) {
    OLMO2_THROW(InputError, "unknown schedule kind ", static_cast<int>(kind));
  }
}

LrSchedule::Kind parse_schedule(const std::string& name) {
  if (name == "cosine") return LrSchedule::Cosine;
  if (name == "linear") return LrSchedule::Linear;
  if (name == "constant") return LrSchedule::Constant;
  OLMO2_THROW(InputError, "unknown learning-rate schedule '", name,
              "' (expected cosine, linear or constant)");
}

const char* schedule_name(LrSchedule::Kind kind) {
  switch (kind) {
    case LrSchedule::Cosine: return "cosine";
    case LrSchedule::Linear: return "linear";
    case LrSchedule::Constant: return "constant";
  }
  return "unknown";
}

}  // namespace olmo2
