#include "monitoring/spike_detector.h"

#include <cmath>

#include "core/error.h"

namespace olmo2::monitoring {

SpikeDetector::SpikeDetector(std::string signal, int64_t window, double sigma)
    : signal_(std::move(signal)), window_(window), sigma_(sigma) {
  if (window < 2) OLMO2_THROW(InputError, "--spike-window must be at least 2 steps, got ", window);
  if (!(sigma > 0) || !std::isfinite(sigma)) OLMO2_THROW(InputError, "--spike-sigma must be > 0, got ", sigma);
}

SpikeCheck SpikeDetector::observe(double value) {
  SpikeCheck c;
  const size_t n = values_.size();
  if (n > 0) {
    double sum = 0;
    for (double v : values_) sum += v;
    c.mean = sum / static_cast<double>(n);
    double sq = 0;
    for (double v : values_) sq += (v - c.mean) * (v - c.mean);
    c.std = std::sqrt(sq / static_cast<double>(n));
    c.threshold = c.mean + sigma_ * c.std;
  }
  c.active = static_cast<int64_t>(n) * 2 >= window_;
  if (!std::isfinite(value)) return c;  // non-finite steps are handled (and counted) elsewhere
  c.spike = c.active && value > c.threshold;
  if (c.spike) {
    ++spikes_;
    return c;
  }
  values_.push_back(value);
  if (static_cast<int64_t>(values_.size()) > window_) values_.pop_front();
  return c;
}

nlohmann::json SpikeDetector::state() const {
  return {{"window", window_}, {"sigma", sigma_}, {"values", values_}, {"spikes", spikes_}};
}

void SpikeDetector::restore(const nlohmann::json& s) {
  try {
    const int64_t w = s.at("window").get<int64_t>();
    if (w != window_) {
      OLMO2_THROW(InputError, "the checkpoint's ", signal_, " spike window is ", w, " steps, --spike-window is ",
                  window_, " (give --spike-window ", w, " to continue it)");
    }
    std::deque<double> v;
    for (const auto& x : s.at("values")) v.push_back(x.get<double>());
    if (static_cast<int64_t>(v.size()) > window_) OLMO2_THROW(InputError, signal_, " spike window holds too many values");
    values_ = std::move(v);
    spikes_ = s.at("spikes").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    OLMO2_THROW(InputError, "spike detector state of ", signal_, ": ", e.what());
  }
}

}  // namespace olmo2::monitoring
