// Pieces the MPI training tests share: a tiny OLMo 2 config, a token file of a learnable
// pattern, and the relative difference of one tensor between two checkpoints.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/io/npy.h"
#include "runtime/train/checkpoint.h"

namespace olmo2::test {

/// A 2-layer OLMo 2 of width 64: vocab 131 (eos 130, pad 129), intermediate 128, 4 heads
/// and `kv_heads` kv heads, context 64, untied embeddings.
inline nlohmann::json tiny_olmo2_config(int kv_heads = 4) {
  return {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 131},
          {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
          {"num_attention_heads", 4}, {"num_key_value_heads", kv_heads},
          {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
          {"tie_word_embeddings", false}, {"eos_token_id", 130}, {"pad_token_id", 129}};
}

/// Writes 2048 token ids to the .npy file `path`: eos every 64 tokens, else mostly the
/// pattern (7·i) % 31 and one in five a random id below 128 (std::mt19937 seeded `seed`).
inline void write_pattern_tokens(const std::string& path, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> ids(2048);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<uint32_t>(i % 64 == 0 ? 130 : rng() % 5 == 0 ? rng() % 128 : (i * 7) % 31);
  }
  NpyWriter w(path);
  w.append(ids);
  w.close();
}

/// ‖a − b‖ / ‖b‖ (L2, in f64) of tensor `name` of checkpoints `a` and `b`.
inline double tensor_difference(const Checkpoint& a, const Checkpoint& b, const std::string& name) {
  const Tensor ta = a.load_f32(name, a.info(name).shape), tb = b.load_f32(name, b.info(name).shape);
  double d = 0, n = 0;
  for (int64_t i = 0; i < tb.numel(); ++i) {
    d += std::pow(double(ta.f32()[i]) - tb.f32()[i], 2), n += std::pow(double(tb.f32()[i]), 2);
  }
  return std::sqrt(d / std::max(n, 1e-300));
}

}  // namespace olmo2::test
