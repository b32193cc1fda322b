#include "runtime/serve/serve_request.h"

namespace olmo2 {

uint64_t choice_seed(uint64_t seed, int32_t c) {
  if (c == 0) return seed;
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(c) + 1);  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Wakeup::epoch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return epoch_;
}

void Wakeup::notify() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++epoch_;
  }
  cv_.notify_all();
}

void Wakeup::wait(uint64_t seen) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return epoch_ != seen; });
}

void ServeRequest::push(CompletionChunk chunk) {
  std::shared_ptr<Wakeup> wakeup;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    chunks_.push_back(std::move(chunk));
    wakeup = wakeup_;
  }
  cv_.notify_all();
  if (wakeup) wakeup->notify();
}

void ServeRequest::bind(std::shared_ptr<Wakeup> wakeup) {
  std::lock_guard<std::mutex> lock(mutex_);
  wakeup_ = std::move(wakeup);
}

std::optional<CompletionChunk> ServeRequest::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return !chunks_.empty(); })) return std::nullopt;
  CompletionChunk c = std::move(chunks_.front());
  chunks_.pop_front();
  return c;
}

}  // namespace olmo2
