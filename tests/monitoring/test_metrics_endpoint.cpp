// The training metrics endpoint (monitoring/train_metrics.h): it stops however soon it is
// destroyed after being made (a job refused right after start).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>

#include "monitoring/train_metrics.h"

namespace olmo2::monitoring {
namespace {

// Destroyed at once, before its server thread has begun to listen: cpp-httplib's stop()
// was then a no-op, the thread accepted forever, and the destructor's join hung (every
// rank of a job whose options were refused). Each make-and-destroy must end promptly.
TEST(MetricsEndpoint, StopsWhenDestroyedRightAfterItIsMade) {
  auto run = std::async(std::launch::async, [] {
    for (int i = 0; i < 300; ++i) MetricsEndpoint endpoint("127.0.0.1", 0);
  });
  if (run.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    // The hung destructor cannot be joined: say so and end the process (a failure).
    std::fprintf(stderr, "FAILED: a MetricsEndpoint destroyed right after it was made never stopped\n");
    std::_Exit(1);
  }
  run.get();
}

}  // namespace
}  // namespace olmo2::monitoring
