// Loss-spike and grad-norm-spike detection over a rolling window (docs/architecture.md §7).
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include <nlohmann/json.hpp>

namespace olmo2::monitoring {

/// What SpikeDetector::observe decided about one value.
struct SpikeCheck {
  bool active = false;   ///< the window held at least half its size before this value
  bool spike = false;    ///< value > mean + sigma · std of the window (active only)
  double mean = 0;       ///< of the window before this value
  double std = 0;        ///< population standard deviation of that window
  double threshold = 0;  ///< mean + sigma · std
};

/// Flags values of one signal (the loss, the grad norm) that jump far above their
/// recent history: with the last `window` accepted values' mean μ and population
/// standard deviation σ, a value v is a spike when v > μ + sigma·σ — once the window
/// holds at least window/2 values (before that nothing is flagged). Spikes and
/// non-finite values are not added to the window, so one spike does not widen the
/// band that the next is measured against. Deterministic: ranks that observe the
/// same values decide the same. Source: a rolling z-score test, as docs/architecture.md §7
/// defines it (window 128, 6σ by default).
class SpikeDetector {
 public:
  /// `signal` names it in logs ("loss", "grad_norm"). Throws InputError for window < 2
  /// or sigma not > 0 (naming the value).
  SpikeDetector(std::string signal, int64_t window, double sigma);

  /// Decides about `value` and, unless it is a spike or not finite, adds it to the window.
  SpikeCheck observe(double value);

  const std::string& signal() const { return signal_; }
  int64_t spikes() const { return spikes_; }      ///< spikes flagged so far (also restored)
  int64_t window() const { return window_; }
  double sigma() const { return sigma_; }
  size_t size() const { return values_.size(); }  ///< values in the window now

  /// {"window": W, "sigma": s, "values": [...], "spikes": n} — saved in checkpoints.
  nlohmann::json state() const;
  /// Restores a state() of a detector with the same window (InputError otherwise, or
  /// for a malformed state). A different sigma is taken from this detector, not the state.
  void restore(const nlohmann::json& state);

 private:
  std::string signal_;
  int64_t window_;
  double sigma_;
  std::deque<double> values_;
  int64_t spikes_ = 0;
};

}  // namespace olmo2::monitoring
