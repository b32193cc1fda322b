// The collective timeout watchdog (parallel/completion_watchdog.h; docs/architecture.md
// §6) with flags standing in for GPU events: watching returns at once whatever the
// work's state, completed entries leave in order, an entry not done within the timeout
// fires the failure callback once (on the watchdog's thread, after its initialiser ran
// there) and stops the watching, and a probe that throws is reported with its message.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "parallel/completion_watchdog.h"

namespace olmo2::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TEST(CompletionWatchdog, WatchingReturnsAtOnceAndDoneEntriesLeave) {
  std::atomic<int> fired{0};
  CompletionWatchdog w(5.0, [&](const std::string&, double, const std::string&) { ++fired; });
  std::vector<std::shared_ptr<std::atomic<bool>>> done;
  const auto t0 = Clock::now();
  for (int i = 0; i < 100; ++i) {
    done.push_back(std::make_shared<std::atomic<bool>>(false));
    w.watch(i, "collective #" + std::to_string(i), [d = done.back()] { return d->load(); });
  }
  EXPECT_LT(since(t0), 0.5) << "watch() must not wait for the work";
  EXPECT_EQ(w.pending(), 100u);
  for (int i = 0; i < 50; ++i) *done[static_cast<size_t>(i)] = true;
  for (int i = 0; i < 500 && w.pending() > 50; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(w.pending(), 50u);
  for (auto& d : done) *d = true;
  w.wait_idle();
  EXPECT_EQ(w.pending(), 0u);
  EXPECT_FALSE(w.failure().has_value());
  EXPECT_EQ(fired.load(), 0);
}

TEST(CompletionWatchdog, ATimeoutFiresOnceOnItsThreadAndNamesTheEntry) {
  std::atomic<int> fired{0};
  std::thread::id init_thread, fire_thread;
  std::string what;
  double waited = 0;
  CompletionWatchdog w(
      0.2,
      [&](const std::string& w_, double s, const std::string& e) {
        what = w_, waited = s, fire_thread = std::this_thread::get_id();
        EXPECT_EQ(e, "");
        ++fired;  // last: the test reads the others once it sees this
      },
      [&] { init_thread = std::this_thread::get_id(); });
  std::atomic<bool> first{false};
  w.watch(7, "all_reduce_sum #7 on group dp", [&] { return first.load(); });
  w.watch(8, "all_reduce_sum #8 on group dp", [] { return false; });
  const auto t0 = Clock::now();
  w.wait_idle();  // returns at the failure
  EXPECT_GE(since(t0), 0.15);
  ASSERT_TRUE(w.failure().has_value());
  EXPECT_EQ(w.failure()->id, 7);
  EXPECT_EQ(w.failure()->what, "all_reduce_sum #7 on group dp");
  EXPECT_GE(w.failure()->waited_s, 0.2);
  for (int i = 0; i < 500 && fired.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(what, "all_reduce_sum #7 on group dp");
  EXPECT_NE(fire_thread, std::this_thread::get_id());
  EXPECT_EQ(fire_thread, init_thread);
  // Nothing more is watched after a failure.
  w.watch(9, "later", [] { return false; });
  EXPECT_EQ(w.pending(), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(fired.load(), 1);
}

TEST(CompletionWatchdog, AFailingProbeIsReportedWithItsMessage) {
  std::string error;
  CompletionWatchdog w(10.0, [&](const std::string&, double, const std::string& e) { error = e; });
  w.watch(1, "send to dp rank 1", [] () -> bool { throw std::runtime_error("cudaErrorLaunchFailure"); });
  w.wait_idle();
  ASSERT_TRUE(w.failure().has_value());
  EXPECT_EQ(w.failure()->error, "cudaErrorLaunchFailure");
  EXPECT_LT(w.failure()->waited_s, 5.0);
}

}  // namespace
}  // namespace olmo2::parallel
