#include "runtime/train/generation_config_file.h"

#include <optional>
#include <vector>

#include "runtime/generation/generation_config.h"

namespace olmo2 {

using nlohmann::json;

json generation_config_to_keep(const std::string& dir, int64_t vocab_size) {
  json kept = json::object();
  if (dir.empty()) return kept;
  const std::optional<GenerationConfig> g = read_generation_config(dir, vocab_size);
  if (!g) return kept;
  if (!g->eos_token_ids.empty()) kept["eos_token_id"] = g->eos_token_ids;
  const GenerationDefaults& d = g->defaults;
  auto keep = [&](const char* name, const auto& value) {
    if (value) kept[name] = *value;
  };
  keep("temperature", d.temperature);
  keep("top_p", d.top_p);
  keep("top_k", d.top_k);
  keep("min_p", d.min_p);
  keep("repetition_penalty", d.repetition_penalty);
  keep("max_new_tokens", d.max_new_tokens);
  keep("do_sample", d.do_sample);
  return kept;
}

json checkpoint_generation_config(const ModelConfig& c, const json& kept) {
  json g = {{"_from_model_config", true}};
  ModelConfig with_kept = c;  // the config's ids first, then the kept ones it lacks
  if (const auto e = kept.find("eos_token_id"); e != kept.end()) {
    with_kept.add_generation_eos_token_ids(e->get<std::vector<int64_t>>());
  }
  const std::vector<int64_t> eos = with_kept.stop_token_ids();
  if (eos.size() == 1) {
    g["eos_token_id"] = eos[0];
  } else if (!eos.empty()) {
    g["eos_token_id"] = eos;
  }
  if (c.pad_token_id) g["pad_token_id"] = *c.pad_token_id;
  if (c.bos_token_id) g["bos_token_id"] = *c.bos_token_id;
  for (const auto& [k, v] : kept.items()) {
    if (k != "eos_token_id") g[k] = v;
  }
  return g;
}

}  // namespace olmo2
