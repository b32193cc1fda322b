// ZeRO units and their chunking over the data-parallel group (Rajbhandari et al. 2020,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"; the units are
// PyTorch FSDP's flat parameters). docs/architecture.md §7 "ZeRO stages".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/config.h"
#include "runtime/model/parameters.h"

namespace olmo2 {

/// A piece of one parameter that lies in this rank's chunk of its unit.
struct ZeroSegment {
  size_t param = 0;   ///< index in the parameter list
  int64_t begin = 0;  ///< first local element of that parameter (row-major, flattened)
  int64_t count = 0;  ///< elements
  int64_t at = 0;     ///< offset of the piece in this rank's chunk of the unit
};

/// Parameters [first, last) of the list, flattened in list order into `total` f32
/// elements and cut into dp chunks of `chunk` = ceil(total / dp) elements (the last one
/// padded); DP rank r owns elements [r·chunk, min(total, (r+1)·chunk)), as `mine`.
struct ZeroUnit {
  size_t first = 0, last = 0;
  int64_t total = 0, chunk = 0;
  std::vector<ZeroSegment> mine;
  /// Offset of parameter `index` (first ≤ index < last) in the unit's flat elements.
  int64_t offset_of(const std::vector<Parameter>& params, size_t index) const;
};

/// The units of a rank's parameter list (its TP/PP shard, HF state-dict order): for
/// `stage` 1 one unit holding every parameter (ZeRO-1's flat chunking); for stages 2 and
/// 3 the embedding ("model.embed_tokens.weight", first pipeline stage), one unit per
/// decoder layer ("model.layers.<i>.", in order) and the tail (the final norm and
/// lm_head, last stage) — the units that exist on this rank, in list order. Each is
/// chunked for DP rank `dp_rank` of `dp_size`. InputError for dp_size < 1 or a rank out
/// of range.
std::vector<ZeroUnit> make_zero_units(const std::vector<Parameter>& params, int stage, int dp_rank, int dp_size);

/// Which unit of make_zero_units(…, stage ≥ 2, …) a parameter belongs to: −1 for the
/// embedding, the layer's position among the rank's layers (0-based), or −2 for the tail.
int zero_unit_kind(const std::string& parameter_name);

/// The models ZeRO stages 2 and 3 can shard (docs/architecture.md §7 "ZeRO stages"): not
/// one with tie_word_embeddings (its embedding would belong to two units), nor kv heads
/// replicated over TP ranks (num_key_value_heads < tp: their partial gradients are summed
/// over TP after the backward, which the per-unit reduce-scatter has already passed).
/// Throws InputError naming the stage and the reason, and the stage that works; no-op
/// for stages 0 and 1. Called by the trainer and by the memory plan alike, so that
/// `olmo2 plan` refuses what `olmo2 train` refuses.
void check_zero_stage_model(int stage, const ModelConfig& config, int tp);

}  // namespace olmo2
