// The prefix cache's salts for steered sequences (docs/architecture.md §13): a steered
// sequence's KV blocks hold other bits than an unsteered one's, so its first block's key
// carries an id of its exact interventions.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "runtime/trace/trace_spec.h"

namespace olmo2 {

/// Interns interventions as ids for SchedSequence::cache_salt: 0 for none (a spec
/// without interventions), then 1, 2, … in order of first appearance, one per
/// distinct TraceSpec::intervention_key(). Keys are compared whole (never by a hash), so
/// equal interventions get one id and share cached blocks, and different ones never do.
/// An id is never handed out twice: when the keys held would pass `max_bytes`, they are
/// forgotten and a key seen again gets a new id (its old blocks are then never hit again,
/// and leave the cache as it evicts). Not thread-safe (the engine thread's).
class InterventionSalts {
 public:
  /// Holds at most `max_bytes` of keys (at least one key, however long). Throws
  /// InputError for max_bytes < 1.
  explicit InterventionSalts(int64_t max_bytes = int64_t{64} << 20);
  /// The id of `spec`'s interventions (0 when it has none), assigning the next one to a
  /// key not held.
  uint64_t salt_of(const trace::TraceSpec& spec);
  /// Distinct keys held now, and their bytes.
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  int64_t bytes() const { return bytes_; }

 private:
  int64_t max_bytes_;
  int64_t bytes_ = 0;
  uint64_t next_ = 1;
  std::unordered_map<std::string, uint64_t> ids_;
};

}  // namespace olmo2
