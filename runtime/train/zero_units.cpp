#include "runtime/train/zero_units.h"

#include <algorithm>

#include "core/error.h"

namespace olmo2 {

int64_t ZeroUnit::offset_of(const std::vector<Parameter>& params, size_t index) const {
  OLMO2_CHECK(index >= first && index < last, "parameter ", index, " is not in unit [", first, ", ", last, ")");
  int64_t at = 0;
  for (size_t i = first; i < index; ++i) at += params[i].numel();
  return at;
}

int zero_unit_kind(const std::string& name) {
  if (name == "model.embed_tokens.weight") return -1;
  if (name.starts_with("model.layers.")) return static_cast<int>(std::stoul(name.substr(13)));
  return -2;
}

std::vector<ZeroUnit> make_zero_units(const std::vector<Parameter>& params, int stage, int dp_rank, int dp_size) {
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size) {
    OLMO2_THROW(InputError, "ZeRO units for DP rank ", dp_rank, " of ", dp_size);
  }
  std::vector<ZeroUnit> units;
  // Stage 1: one unit. Stages 2 and 3: a new unit wherever the unit kind changes (the
  // list is in state-dict order, so each kind's parameters are contiguous).
  for (size_t i = 0; i < params.size(); ++i) {
    const bool split = stage >= 2 && i > 0 && zero_unit_kind(params[i].name) != zero_unit_kind(params[i - 1].name);
    if (units.empty() || split) units.push_back(ZeroUnit{i, i, 0, 0, {}});
    units.back().last = i + 1;
    units.back().total += params[i].numel();
  }
  for (ZeroUnit& u : units) {
    u.chunk = (u.total + dp_size - 1) / dp_size;
    const int64_t begin = dp_rank * u.chunk, end = std::min(u.total, begin + u.chunk);
    int64_t at = 0;
    for (size_t i = u.first; i < u.last; ++i) {
      const int64_t pb = at, pe = at + params[i].numel();
      at = pe;
      const int64_t b = std::max(pb, begin), e = std::min(pe, end);
      if (b < e) u.mine.push_back({i, b - pb, e - b, b - begin});
    }
  }
  return units;
}

void check_zero_stage_model(int stage, const ModelConfig& config, int tp) {
  if (stage < 2) return;
  if (config.tie_word_embeddings) {
    OLMO2_THROW(InputError, "--zero-stage ", stage, " does not support a model with tie_word_embeddings "
                "(its embedding is used by two units); use --zero-stage 1");
  }
  if (config.num_key_value_heads < tp) {
    OLMO2_THROW(InputError, "--zero-stage ", stage, " with kv heads replicated over TP ranks (",
                config.num_key_value_heads, " kv heads, tp ", tp, ") is not supported; use --zero-stage 1");
  }
}

}  // namespace olmo2
