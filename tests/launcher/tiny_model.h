// A tiny OLMo 2 model (or its Olmo 3 variant) to train in CLI tests: config.json (4 layers, hidden 32, 4 query
// and 2 kv heads, vocab 97) and 4096 tokens of a learnable pattern with some noise,
// in a temporary directory.
#pragma once

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/io/npy.h"
#include "tests/test_util.h"

namespace olmo2::test {

/// Writes the tiny model's config.json and tokens.npy into `folder`. `olmo3`: the same
/// sizes as an Olmo 3 model (docs/architecture.md §3): full, sliding, sliding, full
/// layers (pp 2 gives each stage both types), a window of 5 inside the 16-token
/// sequences, YaRN (factor 4 over an original context of 8) on the full layers.
inline void write_tiny_model(const std::string& folder, bool olmo3 = false) {
  nlohmann::json c = {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 97},
                      {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 4},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                      {"tie_word_embeddings", false}, {"eos_token_id", 96}, {"pad_token_id", 95}};
  if (olmo3) {
    c["architectures"] = {"Olmo3ForCausalLM"}, c["model_type"] = "olmo3", c.erase("rope_theta");
    c["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "full_attention"};
    c["sliding_window"] = 5;
    c["rope_parameters"] = {
        {"full_attention",
         {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}, {"original_max_position_embeddings", 8}}},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  }
  std::ofstream(folder + "/config.json") << c.dump(1);
  std::mt19937 rng(7);
  std::vector<uint32_t> ids(4096);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(rng() % 5 == 0 ? rng() % 96 : (i * 3) % 17);
  NpyWriter w(folder + "/tokens.npy");
  w.append(ids);
  w.close();
}

struct TinyModel {
  TempDir dir;
  /// `olmo3`: write_tiny_model's Olmo 3 variant.
  explicit TinyModel(bool olmo3 = false) { write_tiny_model(dir.path(), olmo3); }
  /// "--model-config … --data …" for `olmo2 train`.
  std::string model_and_data() const {
    return "--model-config " + dir.file("config.json") + " --data " + dir.file("tokens.npy");
  }
};

}  // namespace olmo2::test
