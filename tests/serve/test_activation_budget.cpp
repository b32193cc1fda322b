// The server-wide activation budget (runtime/serve/api/activation_budget.h): reservations up
// to the capacity, first come first served, released with their lease; a waiter whose
// client hangs up leaves the line and the one behind it moves up; more than the whole
// budget is refused; the gauges follow.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"
#include "runtime/serve/api/activation_budget.h"

namespace olmo2 {
namespace {

using namespace std::chrono_literals;

TEST(ActivationBudget, ReservesUpToItsCapacityAndReleasesWithTheLease) {
  ActivationBudget b(100, nullptr);
  {
    ActivationBudget::Lease a = b.acquire(60, nullptr);
    EXPECT_EQ(a.bytes(), 60);
    EXPECT_EQ(b.reserved(), 60);
    ActivationBudget::Lease c = b.acquire(40, nullptr);
    EXPECT_EQ(b.reserved(), 100);
    EXPECT_EQ(b.acquire(0, nullptr).bytes(), 0) << "no reads, no wait";
  }
  EXPECT_EQ(b.reserved(), 0);
  EXPECT_THROW(b.acquire(101, nullptr), InputError);
}

TEST(ActivationBudget, AWaiterGetsInWhenRoomIsMadeFirstComeFirstServed) {
  ActivationBudget b(100, nullptr);
  auto first = std::make_unique<ActivationBudget::Lease>(b.acquire(50, nullptr));
  std::atomic<bool> release{false};
  auto hold = [&](int64_t bytes) {
    ActivationBudget::Lease l = b.acquire(bytes, nullptr);
    while (!release.load()) std::this_thread::sleep_for(10ms);
  };
  std::thread big(hold, 60);  // asks first, does not fit beside the 50
  std::this_thread::sleep_for(100ms);
  std::thread small(hold, 10);  // would fit, but waits its turn behind the big one
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(b.reserved(), 50) << "the small request overtook the one that asked first";
  first.reset();
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (b.reserved() != 70 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(b.reserved(), 70) << "both in once the room is made";
  release = true;
  big.join();
  small.join();
  EXPECT_EQ(b.reserved(), 0);
}

TEST(ActivationBudget, AWaiterWhoseClientLeftGivesUpItsPlace) {
  ActivationBudget b(100, nullptr);
  ActivationBudget::Lease first = b.acquire(90, nullptr);
  std::atomic<bool> gone{false};
  ActivationBudget::Lease abandoned;
  std::thread leaver([&] { abandoned = b.acquire(50, [&] { return gone.load(); }); });
  std::this_thread::sleep_for(100ms);
  std::atomic<bool> behind_in{false};
  std::thread behind([&] {
    ActivationBudget::Lease l = b.acquire(10, nullptr);
    behind_in = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(behind_in.load()) << "it waits behind the first in line";
  gone = true;
  b.wake();  // what the API's on_client_gone does: no polling, so the waiter must be told
  leaver.join();
  EXPECT_EQ(abandoned.bytes(), 0) << "nothing reserved for a client that left";
  behind.join();
  EXPECT_TRUE(behind_in.load()) << "the line moved up past the one that left";
}

}  // namespace
}  // namespace olmo2
