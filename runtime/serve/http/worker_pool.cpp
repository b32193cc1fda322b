#include "runtime/serve/http/worker_pool.h"

#include <stdexcept>
#include <string>

namespace olmo2::http {

WorkerPool::WorkerPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  if (threads < 1) throw std::invalid_argument("a worker pool needs at least one thread, got " + std::to_string(threads));
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

WorkerPool::~WorkerPool() { stop(); }

bool WorkerPool::try_post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Tasks beyond the idle threads wait; at most max_queued_ of them.
    if (stopping_ || tasks_.size() >= max_queued_ + static_cast<size_t>(idle_)) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void WorkerPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void WorkerPool::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // what it holds (a connection) goes before the next wait
    lock.lock();
  }
}

}  // namespace olmo2::http
