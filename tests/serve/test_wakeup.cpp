// The HTTP side's wake-up (runtime/serve/serve_request.h, docs/architecture.md §8): one
// waiter for the chunks of several requests, woken by each push, never by a timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "runtime/serve/serve_request.h"

namespace olmo2 {
namespace {

using namespace std::chrono_literals;

TEST(Wakeup, APushToAnyBoundRequestWakesTheWaiter) {
  auto wakeup = std::make_shared<Wakeup>();
  ServeRequest a(1, CompletionParams{}), b(2, CompletionParams{});
  a.bind(wakeup);
  b.bind(wakeup);
  const uint64_t seen = wakeup->epoch();
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    wakeup->wait(seen);
    woke = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(woke.load()) << "nothing happened: the waiter sleeps";
  CompletionChunk c;
  c.text = "x";
  b.push(c);
  waiter.join();
  EXPECT_TRUE(woke.load());
  EXPECT_FALSE(a.next(0ms).has_value());
  ASSERT_TRUE(b.next(0ms).has_value());
}

TEST(Wakeup, AnEventBetweenTheLookAndTheWaitIsNotLost) {
  auto wakeup = std::make_shared<Wakeup>();
  ServeRequest r(1, CompletionParams{});
  r.bind(wakeup);
  const uint64_t seen = wakeup->epoch();  // the waiter reads the epoch, then looks …
  EXPECT_FALSE(r.next(0ms).has_value());
  r.push(CompletionChunk{});              // … a chunk comes before it waits …
  wakeup->wait(seen);                     // … so the wait returns at once
  EXPECT_NE(wakeup->epoch(), seen);
  EXPECT_TRUE(r.next(0ms).has_value());
}

TEST(Wakeup, ChunksPushedBeforeBindingAreQueued) {
  ServeRequest r(1, CompletionParams{});
  r.push(CompletionChunk{});
  auto wakeup = std::make_shared<Wakeup>();
  r.bind(wakeup);
  EXPECT_EQ(wakeup->epoch(), 0u) << "binding is not an event";
  EXPECT_TRUE(r.next(0ms).has_value()) << "the first look finds it";
}

}  // namespace
}  // namespace olmo2
