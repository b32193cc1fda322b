#include "runtime/serve/api/grammar_cache.h"

#include <algorithm>

namespace olmo2 {

GrammarCache::GrammarCache(int64_t capacity) : capacity_(std::max<int64_t>(capacity, 1)) {}

std::shared_ptr<const structured::Grammar> GrammarCache::get(const std::string& key,
                                                             const std::function<std::string()>& compile) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  std::shared_ptr<const structured::Grammar> grammar = structured::Grammar::parse(compile());
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = index_.find(key); it != index_.end()) return it->second->second;  // another thread's
  order_.emplace_front(key, grammar);
  index_[key] = order_.begin();
  while (static_cast<int64_t>(order_.size()) > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
  return grammar;
}

int64_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(order_.size());
}

int64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}

int64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

GrammarCache& grammar_cache() {
  static GrammarCache cache;
  return cache;
}

}  // namespace olmo2
