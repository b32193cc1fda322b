// The bf16 compute copy of f32 master weights (runtime/model/weights.h, bf16 training in
// docs/architecture.md §7): weights_in rounds every tensor to nearest even,
// copy_weights refreshes the copy after an update, and the tensors a rank does not hold
// — a pipeline stage's embedding, final norm and lm_head, a tied model's lm_head — stay
// empty on both sides.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ops/dtype.h"
#include "runtime/model/parameters.h"
#include "runtime/model/weights.h"

namespace olmo2 {
namespace {

ModelConfig tiny(bool tied) {
  return ModelConfig::from_json({{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 11},
                                 {"hidden_size", 8}, {"intermediate_size", 12}, {"num_hidden_layers", 3},
                                 {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                                 {"max_position_embeddings", 16}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                                 {"tie_word_embeddings", tied}, {"eos_token_id", 10}, {"pad_token_id", 9}},
                                "test");
}

/// Fills every tensor of `w` with distinct values that bf16 cannot hold exactly.
void fill(ModelWeights& w, float offset) {
  float v = offset;
  auto each = [&](Tensor& t) {
    if (t.empty()) return;
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = (v += 0.0123457f);
  };
  each(w.embed_tokens), each(w.norm), each(w.lm_head);
  for (LayerWeights& l : w.layers) {
    for (Tensor* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.q_norm, &l.k_norm, &l.gate_proj, &l.up_proj,
                      &l.down_proj, &l.post_attention_layernorm, &l.post_feedforward_layernorm}) {
      each(*t);
    }
  }
}

/// Every element of `b` (bf16) is `f`'s (f32) rounded to nearest even; the same tensors
/// are empty.
void expect_rounded(const ModelWeights& f, const ModelWeights& b) {
  auto same = [](const Tensor& x, const Tensor& y, const char* what) {
    ASSERT_EQ(x.empty(), y.empty()) << what;
    if (x.empty()) return;
    ASSERT_EQ(y.dtype(), DType::BF16) << what;
    ASSERT_EQ(x.shape(), y.shape()) << what;
    const auto* bits = static_cast<const uint16_t*>(y.view().data());
    for (int64_t i = 0; i < x.numel(); ++i) {
      ASSERT_EQ(bits[i], f32_to_bf16(x.f32()[i])) << what << " element " << i;
    }
  };
  same(f.embed_tokens, b.embed_tokens, "embed_tokens");
  same(f.norm, b.norm, "norm");
  same(f.lm_head, b.lm_head, "lm_head");
  ASSERT_EQ(f.layers.size(), b.layers.size());
  for (size_t l = 0; l < f.layers.size(); ++l) {
    same(f.layers[l].q_proj, b.layers[l].q_proj, "q_proj");
    same(f.layers[l].k_norm, b.layers[l].k_norm, "k_norm");
    same(f.layers[l].down_proj, b.layers[l].down_proj, "down_proj");
    same(f.layers[l].post_feedforward_layernorm, b.layers[l].post_feedforward_layernorm, "post_feedforward_layernorm");
  }
}

TEST(Weights, Bf16CopyOfEveryStageAndOfATiedModel) {
  for (const bool tied : {false, true}) {
    const ModelConfig c = tiny(tied);
    std::vector<ShardSpec> shards = {ShardSpec::whole(c)};
    if (!tied) {  // pipeline stages: the first without the head, the middle with layers only, the last without the embedding
      ShardSpec first = ShardSpec::whole(c), middle = first, last = first;
      first.chunks = {{0, 1}}, first.final_norm = false;
      middle.chunks = {{1, 2}}, middle.embedding = false, middle.final_norm = false;
      last.chunks = {{2, 3}}, last.embedding = false;
      shards.insert(shards.end(), {first, middle, last});
    }
    for (const ShardSpec& sh : shards) {
      SCOPED_TRACE("tied " + std::to_string(tied) + ", layers " + std::to_string(sh.chunks.front().begin) + "-" +
                   std::to_string(sh.chunks.front().end));
      ModelWeights master = zero_weights(c, sh);
      fill(master, 0.5f);
      ModelWeights compute = weights_in(master, DType::BF16);
      expect_rounded(master, compute);
      fill(master, -0.25f);  // an optimizer step
      copy_weights(master, compute);
      expect_rounded(master, compute);
    }
  }
  // Structures that differ are refused.
  const ModelConfig c = tiny(false);
  ModelWeights whole = zero_weights(c, ShardSpec::whole(c));
  ShardSpec stage = ShardSpec::whole(c);
  stage.embedding = false;
  ModelWeights part = weights_in(zero_weights(c, stage), DType::BF16);
  EXPECT_THROW(copy_weights(whole, part), ShapeError);
}

}  // namespace
}  // namespace olmo2
