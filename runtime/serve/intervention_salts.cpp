#include "runtime/serve/intervention_salts.h"

#include "core/error.h"

namespace olmo2 {

InterventionSalts::InterventionSalts(int64_t max_bytes) : max_bytes_(max_bytes) {
  if (max_bytes < 1) OLMO2_THROW(InputError, "intervention salts limited to ", max_bytes, " bytes");
}

uint64_t InterventionSalts::salt_of(const trace::TraceSpec& spec) {
  if (spec.interventions.empty()) return 0;
  std::string key = spec.intervention_key();
  if (const auto it = ids_.find(key); it != ids_.end()) return it->second;
  const int64_t size = static_cast<int64_t>(key.size());
  if (bytes_ + size > max_bytes_) {  // forget every key: ids go on counting, never reused
    ids_.clear();
    bytes_ = 0;
  }
  bytes_ += size;
  const uint64_t id = next_++;
  ids_.emplace(std::move(key), id);
  return id;
}

}  // namespace olmo2
