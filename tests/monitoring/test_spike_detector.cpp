// The rolling z-score spike detector: one outlier in a noisy sequence is one event,
// nothing before half a window, drift is not a spike, state survives a round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "monitoring/spike_detector.h"
#include "core/error.h"

namespace olmo2::monitoring {
namespace {

/// A loss-like sequence: 3.0 plus a small deterministic wiggle.
double noisy(int i) { return 3.0 + 0.05 * std::sin(0.7 * i) + 0.02 * std::cos(2.3 * i + 1.0); }

TEST(SpikeDetector, OneOutlierInANoisySequenceIsExactlyOneEvent) {
  SpikeDetector d("loss", 128, 6.0);
  std::vector<int> events;
  for (int i = 0; i < 400; ++i) {
    const double v = i == 250 ? 3.6 : noisy(i);
    const SpikeCheck c = d.observe(v);
    if (c.spike) events.push_back(i);
    if (i == 250) {
      EXPECT_TRUE(c.active);
      EXPECT_NEAR(c.mean, 3.0, 0.01);
      EXPECT_GT(c.std, 0.02);
      EXPECT_LT(c.threshold, 3.6);
    }
  }
  EXPECT_EQ(events, std::vector<int>{250});
  EXPECT_EQ(d.spikes(), 1);
  EXPECT_EQ(d.size(), 128u);
}

TEST(SpikeDetector, NothingIsFlaggedBeforeHalfAWindow) {
  SpikeDetector d("loss", 20, 6.0);
  for (int i = 0; i < 9; ++i) EXPECT_FALSE(d.observe(noisy(i)).active);
  const SpikeCheck early = d.observe(100.0);  // the 10th value: 9 in the window, < 20 / 2
  EXPECT_FALSE(early.active);
  EXPECT_FALSE(early.spike);
  EXPECT_TRUE(d.observe(noisy(11)).active);  // now 10 values
}

TEST(SpikeDetector, DriftIsNotASpikeAndSpikesDoNotWidenTheBand) {
  SpikeDetector d("loss", 32, 6.0);
  for (int i = 0; i < 300; ++i) EXPECT_FALSE(d.observe(10.0 - 0.02 * i + 0.01 * std::sin(i)).spike) << i;
  // Two outliers in a row are both spikes: the first is not added to the window.
  EXPECT_TRUE(d.observe(50.0).spike);
  EXPECT_TRUE(d.observe(50.0).spike);
  EXPECT_EQ(d.spikes(), 2);
  // Non-finite values are neither spikes nor window entries.
  const size_t n = d.size();
  EXPECT_FALSE(d.observe(std::nan("")).spike);
  EXPECT_EQ(d.size(), n);
}

TEST(SpikeDetector, StateRoundTripContinuesTheSameDecisions) {
  SpikeDetector a("grad_norm", 16, 3.0), b("grad_norm", 16, 3.0);
  for (int i = 0; i < 40; ++i) a.observe(noisy(i) + (i == 30 ? 1.0 : 0.0));
  b.restore(nlohmann::json::parse(a.state().dump()));  // as a checkpoint stores it
  EXPECT_EQ(b.spikes(), a.spikes());
  for (int i = 40; i < 80; ++i) {
    const double v = noisy(i) + (i % 17 == 0 ? 0.5 : 0.0);
    const SpikeCheck x = a.observe(v), y = b.observe(v);
    EXPECT_EQ(x.spike, y.spike) << i;
    EXPECT_EQ(x.threshold, y.threshold) << i;
  }
  SpikeDetector other("grad_norm", 8, 3.0);
  EXPECT_THROW(other.restore(a.state()), InputError);
  EXPECT_THROW(other.restore(nlohmann::json{{"window", 8}}), InputError);
}

TEST(SpikeDetector, RefusesMeaninglessOptions) {
  EXPECT_THROW(SpikeDetector("loss", 1, 6.0), InputError);
  EXPECT_THROW(SpikeDetector("loss", 128, 0.0), InputError);
  EXPECT_THROW(SpikeDetector("loss", 128, std::nan("")), InputError);
}

}  // namespace
}  // namespace olmo2::monitoring
