// Which KV group and slot each layer's keys and values use: vLLM's hybrid layout for
// models with full-attention and sliding-window layers (docs/architecture.md §8,
// "Sliding-window KV (KV groups)").
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/config.h"

namespace olmo2 {

/// The KV groups of a model. One attention type (OLMo 2; an all-sliding or all-full
/// Olmo 3): one group of every layer, layer l in slot l. Else, with F full and S sliding
/// layers and g = gcd(F, S): the full layers in model order fill groups 0 … F/g − 1, g
/// each (the i-th full layer is group i / g, slot i % g), then the sliding layers fill
/// groups F/g … F/g + S/g − 1 alike. Every group has g layers of one type, hence one
/// window. A sequence has one block table per group; a block id in group k's table holds,
/// in slot s's pool, the keys and values of group k's layer in slot s.
class KVLayout {
 public:
  /// The layout of `config` (its layer_types; empty means every layer Full). Throws
  /// InputError when layer_types has an entry count other than num_hidden_layers, or a
  /// model with sliding layers has sliding_window < 1.
  explicit KVLayout(const ModelConfig& config);

  /// Number of groups (≥ 1).
  int64_t groups() const { return static_cast<int64_t>(windows_.size()); }
  /// Layers per group, i.e. slots (g; the layer count with one group).
  int64_t slots() const { return slots_; }
  /// Group / slot of layer `layer` (0-based, of the whole model).
  int64_t group_of(int64_t layer) const { return group_.at(static_cast<size_t>(layer)); }
  int64_t slot_of(int64_t layer) const { return slot_.at(static_cast<size_t>(layer)); }
  /// Attention window of group `group`'s layers (config.attention_window of each): 0 for
  /// full attention, sliding_window for sliding layers.
  int64_t window(int64_t group) const { return windows_.at(static_cast<size_t>(group)); }
  /// Every group's window, in group order.
  const std::vector<int64_t>& windows() const { return windows_; }
  /// Whether some group has a window (its blocks can be released as sequences grow).
  bool has_sliding_groups() const;

 private:
  int64_t slots_ = 0;
  std::vector<int64_t> group_, slot_, windows_;
};

}  // namespace olmo2
