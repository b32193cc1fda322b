#include "runtime/model/kv_layout.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace olmo2 {

KVLayout::KVLayout(const ModelConfig& c) {
  const int64_t layers = c.num_hidden_layers;
  const auto& types = c.layer_types;
  if (!types.empty() && static_cast<int64_t>(types.size()) != layers) {
    OLMO2_THROW(InputError, "layer_types has ", types.size(), " entries for ", layers, " layers");
  }
  auto sliding = [&](int64_t l) { return !types.empty() && types[static_cast<size_t>(l)] == AttentionType::Sliding; };
  int64_t s = 0;
  for (int64_t l = 0; l < layers; ++l) s += sliding(l) ? 1 : 0;
  const int64_t f = layers - s;
  if (s > 0 && c.sliding_window < 1) {
    OLMO2_THROW(InputError, "a model with sliding-attention layers needs sliding_window ≥ 1, got ", c.sliding_window);
  }
  group_.resize(static_cast<size_t>(layers));
  slot_.resize(static_cast<size_t>(layers));
  if (f == 0 || s == 0) {  // one attention type: one group of every layer
    slots_ = layers;
    std::iota(slot_.begin(), slot_.end(), 0);
    windows_.push_back(s > 0 ? c.sliding_window : 0);
    return;
  }
  slots_ = std::gcd(f, s);
  for (int64_t k = 0; k < f / slots_; ++k) windows_.push_back(0);
  for (int64_t k = 0; k < s / slots_; ++k) windows_.push_back(c.sliding_window);
  int64_t full_seen = 0, sliding_seen = 0;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t i = sliding(l) ? sliding_seen++ : full_seen++;
    group_[static_cast<size_t>(l)] = (sliding(l) ? f / slots_ : 0) + i / slots_;
    slot_[static_cast<size_t>(l)] = i % slots_;
  }
}

bool KVLayout::has_sliding_groups() const {
  return std::any_of(windows_.begin(), windows_.end(), [](int64_t w) { return w > 0; });
}

}  // namespace olmo2
