// A watchdog for work enqueued on a GPU stream (docs/architecture.md §6, "Timeouts
// without waiting"): the caller hands it a completion probe per collective and returns
// at once; a background thread polls the probes in order and, when the oldest has not
// completed within the timeout, records the failure and calls `on_timeout` (for NCCL:
// ncclCommAbort, which ends the hung kernels so that any stream wait returns). The
// caller learns of it at its next call (failure()). So a timeout costs the host no
// wait for the GPU, where polling each collective to completion on the calling thread
// would serialise the host with the stream. Independent of CUDA: the probes are
// functions, so the CPU tests drive it with flags.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace olmo2::parallel {

class CompletionWatchdog {
 public:
  /// True once the watched work is done; throws (with a message) when it failed.
  using Probe = std::function<bool()>;
  /// Called once, on the watchdog's thread, when an entry times out or its probe throws:
  /// what the entry was, how long it waited (s), and the probe's message (empty on a timeout).
  using OnFailure = std::function<void(const std::string& what, double waited_s, const std::string& error)>;

  struct Failure {
    int64_t id = 0;    ///< the entry's id, as given to watch()
    std::string what;  ///< the entry's description
    double waited_s = 0;
    std::string error;  ///< the probe's message; empty for a timeout
  };

  /// `timeout_s` > 0. `thread_init` runs first on the watchdog's thread (bind the GPU).
  CompletionWatchdog(double timeout_s, OnFailure on_failure, std::function<void()> thread_init = {});
  /// Stops the thread (entries still pending are dropped unprobed).
  ~CompletionWatchdog();
  CompletionWatchdog(const CompletionWatchdog&) = delete;
  CompletionWatchdog& operator=(const CompletionWatchdog&) = delete;

  /// Watches `probe` (entry `id`, described by `what`) from now on; returns at once.
  /// Ignored after a failure.
  void watch(int64_t id, std::string what, Probe probe);
  /// The first failure, if any (then nothing more is watched).
  std::optional<Failure> failure() const;
  /// Entries not yet seen complete.
  size_t pending() const;
  /// Blocks until no entry is pending or a failure was recorded (tests, shutdown).
  void wait_idle() const;

 private:
  struct Entry {
    int64_t id;
    std::string what;
    Probe probe;
    std::chrono::steady_clock::time_point since;
  };
  void loop(std::function<void()> thread_init);

  const double timeout_s_;
  OnFailure on_failure_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<Entry> entries_;
  std::optional<Failure> failure_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace olmo2::parallel
