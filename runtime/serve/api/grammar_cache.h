// Compiled structured-output grammars shared by every request that asks for the same
// constraint (docs/architecture.md §8, "Structured outputs"): a schema is compiled once
// per distinct canonical text, not once per request.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/structured/constraint.h"

namespace olmo2 {

/// A size-bounded, thread-safe map from a constraint's canonical key (its kind, options
/// and canonical text) to its compiled grammar; the least recently used entry leaves
/// first. Compilation runs outside the lock (two threads asking for one new key may both
/// compile it; the first result is kept).
class GrammarCache {
 public:
  explicit GrammarCache(int64_t capacity = 32);
  /// The grammar of `key`, made by `compile` (grammar text, then Grammar::parse) when
  /// absent. Whatever `compile` or the parse throws (ConstraintError) propagates, and
  /// nothing is cached.
  std::shared_ptr<const structured::Grammar> get(const std::string& key, const std::function<std::string()>& compile);
  int64_t size() const;
  /// Lookups answered from the cache, and compilations (for the cost figures and tests).
  int64_t hits() const;
  int64_t misses() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const structured::Grammar>>;
  int64_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  int64_t hits_ = 0, misses_ = 0;
};

/// The process's cache, shared by the completions and chat endpoints.
GrammarCache& grammar_cache();

}  // namespace olmo2
