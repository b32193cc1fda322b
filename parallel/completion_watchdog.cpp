// CompletionWatchdog (parallel/completion_watchdog.h).
#include "parallel/completion_watchdog.h"

#include <exception>
#include <utility>

namespace olmo2::parallel {

CompletionWatchdog::CompletionWatchdog(double timeout_s, OnFailure on_failure, std::function<void()> thread_init)
    : timeout_s_(timeout_s), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this, init = std::move(thread_init)]() mutable { loop(std::move(init)); });
}

CompletionWatchdog::~CompletionWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CompletionWatchdog::watch(int64_t id, std::string what, Probe probe) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_) return;
    entries_.push_back({id, std::move(what), std::move(probe), std::chrono::steady_clock::now()});
  }
  cv_.notify_all();
}

std::optional<CompletionWatchdog::Failure> CompletionWatchdog::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

size_t CompletionWatchdog::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void CompletionWatchdog::wait_idle() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return entries_.empty() || failure_.has_value() || stop_; });
}

void CompletionWatchdog::loop(std::function<void()> thread_init) {
  if (thread_init) thread_init();
  std::unique_lock<std::mutex> lock(mu_);
  int idle_polls = 0;
  while (!stop_) {
    if (entries_.empty() || failure_) {
      idle_polls = 0;
      cv_.wait(lock, [&] { return stop_ || (!entries_.empty() && !failure_); });
      continue;
    }
    // Probe the oldest entries (in enqueue order) without holding the lock.
    Entry front = entries_.front();
    lock.unlock();
    bool done = false;
    std::string error;
    try {
      done = front.probe();
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown error";
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - front.since).count();
    lock.lock();
    if (done && error.empty()) {
      entries_.pop_front();
      idle_polls = 0;
      if (entries_.empty()) cv_.notify_all();
      continue;
    }
    if (!error.empty() || waited >= timeout_s_) {
      failure_ = Failure{front.id, front.what, waited, error};
      entries_.clear();
      lock.unlock();
      cv_.notify_all();
      if (on_failure_) on_failure_(front.what, waited, error);
      lock.lock();
      continue;
    }
    // Not done yet: poll often at first (collectives take microseconds to milliseconds),
    // then every 10 ms, so an idle wait costs little CPU.
    ++idle_polls;
    cv_.wait_for(lock, std::chrono::microseconds(idle_polls < 100 ? 50 : 10000), [&] { return stop_; });
  }
}

}  // namespace olmo2::parallel
