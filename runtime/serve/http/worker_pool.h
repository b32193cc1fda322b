// A fixed set of threads running handlers, which may block (waiting on the engine),
// with a bounded queue in front of them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace olmo2::http {

class WorkerPool {
 public:
  /// Starts `threads` (≥ 1) threads; at most `max_queued` (≥ 0) tasks wait beyond the
  /// running ones. Throws std::invalid_argument otherwise.
  WorkerPool(int threads, size_t max_queued);
  /// stop().
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Queues `task`; false (and `task` dropped) when the queue is full or the pool stopped.
  bool try_post(std::function<void()> task);
  /// Runs what is queued, then joins the threads. Idempotent.
  void stop();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  size_t max_queued_;
  int idle_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace olmo2::http
