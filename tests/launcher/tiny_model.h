// A tiny OLMo 2 model to train in CLI tests: config.json (4 layers, hidden 32, 4 query
// and 2 kv heads, vocab 97) and 4096 tokens of a learnable pattern with some noise,
// in a temporary directory.
#pragma once

#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/io/npy.h"
#include "tests/test_util.h"

namespace olmo2::test {

struct TinyModel {
  TempDir dir;
  TinyModel() {
    const nlohmann::json c = {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 97},
                              {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 4},
                              {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                              {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                              {"tie_word_embeddings", false}, {"eos_token_id", 96}, {"pad_token_id", 95}};
    std::ofstream(dir.file("config.json")) << c.dump(1);
    std::mt19937 rng(7);
    std::vector<uint32_t> ids(4096);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(rng() % 5 == 0 ? rng() % 96 : (i * 3) % 17);
    NpyWriter w(dir.file("tokens.npy"));
    w.append(ids);
    w.close();
  }
  /// "--model-config … --data …" for `olmo2 train`.
  std::string model_and_data() const {
    return "--model-config " + dir.file("config.json") + " --data " + dir.file("tokens.npy");
  }
};

}  // namespace olmo2::test
