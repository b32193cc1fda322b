#include "runtime/serve/serve_request.h"

namespace olmo2 {

void ServeRequest::push(CompletionChunk chunk) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    chunks_.push_back(std::move(chunk));
  }
  cv_.notify_all();
}

std::optional<CompletionChunk> ServeRequest::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return !chunks_.empty(); })) return std::nullopt;
  CompletionChunk c = std::move(chunks_.front());
  chunks_.pop_front();
  return c;
}

}  // namespace olmo2
