// Activation recomputation on one process (docs/architecture.md §7 "Recomputation"):
// each mode keeps only its set of activations, the recomputed ones are the ones None
// keeps bit for bit, and a layer's backward and the whole model's forward_backward give
// bit-identical gradients and losses in fp32 and bf16, OLMo 2 (MHA, GQA) and Olmo 3
// (sliding-window and YaRN layers).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "runtime/model/parameters.h"
#include "runtime/train/train_step.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;

/// A 2-layer model of hidden 64 (4 query heads of 16; `kv_heads` kv heads); `olmo3`:
/// a sliding layer (window 5) then a full one with YaRN, as Olmo 3's layer types.
ModelConfig config_of(int kv_heads, bool olmo3) {
  nlohmann::json c = {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 61},
                      {"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"num_key_value_heads", kv_heads},
                      {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                      {"tie_word_embeddings", false}, {"eos_token_id", 60}, {"pad_token_id", 59}};
  if (olmo3) {
    c["architectures"] = {"Olmo3ForCausalLM"}, c["model_type"] = "olmo3", c.erase("rope_theta");
    c["layer_types"] = {"sliding_attention", "full_attention"};
    c["sliding_window"] = 5;
    c["rope_parameters"] = {
        {"full_attention",
         {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}, {"original_max_position_embeddings", 8}}},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  }
  return ModelConfig::from_json(c, "recompute test");
}

struct Case {
  const char* name;
  int kv_heads;
  bool olmo3;
  Precision precision;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const Case kCases[] = {{"mha_fp32", 4, false, Precision::FP32}, {"gqa_fp32", 2, false, Precision::FP32},
                       {"olmo3_fp32", 2, true, Precision::FP32}, {"mha_bf16", 4, false, Precision::BF16},
                       {"gqa_bf16", 2, false, Precision::BF16},  {"olmo3_bf16", 2, true, Precision::BF16}};

/// Two sequences of 12 and 7 tokens (packed: the second starts at row 12).
const std::vector<std::vector<int32_t>> kIds = {{3, 17, 8, 40, 22, 9, 51, 4, 30, 12, 6, 45}, {11, 2, 58, 33, 7, 19, 26}};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.view().data(), b.view().data(), a.view().bytes()) == 0;
}

Tensor random_rows(int64_t rows, int64_t cols, unsigned seed) {
  Tensor t = Tensor::zeros({rows, cols});
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(rng);
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::zeros(t.shape(), t.dtype());
  std::memcpy(c.view().data(), t.view().data(), t.view().bytes());
  return c;
}

/// The twelve activations of LayerActivations, by name.
const std::pair<const char*, Tensor LayerActivations::*> kMembers[] = {
    {"x", &LayerActivations::x},       {"q0", &LayerActivations::q0},     {"k0", &LayerActivations::k0},
    {"qr", &LayerActivations::qr},     {"kr", &LayerActivations::kr},     {"v", &LayerActivations::v},
    {"attn", &LayerActivations::attn}, {"p", &LayerActivations::p},       {"x1", &LayerActivations::x1},
    {"gate", &LayerActivations::gate}, {"up", &LayerActivations::up},     {"m", &LayerActivations::m}};

/// What the forward of `mode` must keep (docs/architecture.md §7 "Recomputation").
std::vector<std::string> kept_by(Recompute mode) {
  switch (mode) {
    case Recompute::None:
      return {"x", "q0", "k0", "qr", "kr", "v", "attn", "p", "x1", "gate", "up", "m"};
    case Recompute::Selective:
      return {"x", "q0", "k0", "v", "p", "gate", "up", "m"};
    case Recompute::Full:
      return {"x"};
  }
  return {};
}

class RecomputeLayer : public ::testing::TestWithParam<Case> {};

// Layer by layer (a sliding and a full one for Olmo 3): the forward keeps exactly its
// mode's set (the dropped tensors are not even allocated) and gives the same output;
// recompute_activations restores None's set bit for bit; the backward (which recomputes
// by itself) gives the same input gradient and parameter gradients bit for bit.
TEST_P(RecomputeLayer, KeepsItsSetAndRecomputesNonesBits) {
  const Case& c = GetParam();
  const Olmo2Model model = Olmo2Model::random(config_of(c.kv_heads, c.olmo3), 3, 0.2f, c.precision);
  TokenBatch tb;
  for (const auto& ids : kIds) tb.tokens.emplace_back(ids);
  const PackedTokens packed = pack_tokens(tb, model.config());
  const LayerContext lc = model.layer_context({});
  const int64_t n = packed.rows(), h = model.config().hidden_size;
  for (size_t l = 0; l < model.weights().layers.size(); ++l) {
    const LayerWeights& w = model.weights().layers[l];
    const Tensor input = random_rows(n, h, 10 + static_cast<unsigned>(l)), dout = random_rows(n, h, 20);
    // Forward (and optionally the recomputation) in `mode`: the output and the activations.
    auto forward = [&](Recompute mode, Tensor& out, LayerActivations& a) {
      out = copy_of(input);
      LayerWorkspace ws;
      decoder_layer_forward(lc, w, static_cast<int64_t>(l), packed, nullptr,
                            LayerOptions{model.activation_dtype(), false, nullptr, mode}, out.view(), ws, &a, nullptr);
    };
    auto backward = [&](Recompute mode, Tensor& dx, ModelWeights& g) {
      Tensor out;
      LayerActivations a;
      forward(mode, out, a);
      dx = copy_of(dout), g = zeros_like_weights(model.weights());
      LayerBackwardWorkspace ws;
      decoder_layer_backward(lc, w, g.layers[l], packed, a, dx.view(), ws);
    };
    Tensor out_none, dx_none;
    LayerActivations none;
    ModelWeights g_none;
    forward(Recompute::None, out_none, none);
    backward(Recompute::None, dx_none, g_none);
    for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
      const std::string what = std::string(c.name) + " layer " + std::to_string(l) + " " + recompute_name(mode);
      Tensor out;
      LayerActivations a;
      forward(mode, out, a);
      EXPECT_TRUE(same_bits(out, out_none)) << what << ": the layer's output";
      const std::vector<std::string> kept = kept_by(mode);
      for (const auto& [name, member] : kMembers) {
        const bool expected = std::find(kept.begin(), kept.end(), name) != kept.end();
        EXPECT_EQ(!(a.*member).empty(), expected) << what << ": " << name << (expected ? " dropped" : " kept");
      }
      LayerWorkspace ws;
      recompute_activations(lc, w, packed, a, ws);
      EXPECT_EQ(a.recompute, Recompute::None) << what;
      for (const auto& [name, member] : kMembers) {
        EXPECT_TRUE(same_bits(a.*member, none.*member)) << what << ": recomputed " << name;
      }
      Tensor dx;
      ModelWeights g;
      backward(mode, dx, g);
      EXPECT_TRUE(same_bits(dx, dx_none)) << what << ": the input gradient";
      std::vector<Parameter> pn = list_parameters(g_none, g_none, model.config(), model.shard());
      std::vector<Parameter> pm = list_parameters(g, g, model.config(), model.shard());
      for (size_t i = 0; i < pm.size(); ++i) EXPECT_TRUE(same_bits(*pm[i].grad, *pn[i].grad)) << what << ": " << pm[i].name;
    }
  }
}

class RecomputeModel : public ::testing::TestWithParam<Case> {};

// The whole model's forward_backward (embedding, both layers, final norm, chunked lm_head
// and loss): the loss sums and every parameter's gradient, bit for bit.
TEST_P(RecomputeModel, ForwardBackwardIsBitIdentical) {
  const Case& c = GetParam();
  const Olmo2Model model = Olmo2Model::random(config_of(c.kv_heads, c.olmo3), 5, 0.2f, c.precision);
  std::vector<Sample> batch;
  for (const auto& ids : kIds) {
    std::vector<int32_t> labels(ids.begin() + 1, ids.end());
    labels.push_back(-100);
    batch.push_back(Sample{ids, labels, 0});
  }
  auto run = [&](Recompute mode, ModelWeights& g) {
    g = zeros_like_weights(model.weights());
    return forward_backward(model, g, batch, 1e-4f, 1.0f / 17.0f, 8, {}, mode);
  };
  ModelWeights g_none;
  const LossSums none = run(Recompute::None, g_none);
  ASSERT_EQ(none.count, 17);
  for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
    const std::string what = std::string(c.name) + " " + recompute_name(mode);
    ModelWeights g;
    const LossSums s = run(mode, g);
    EXPECT_EQ(std::memcmp(&s.ce_sum, &none.ce_sum, sizeof(double)), 0) << what << ": " << s.ce_sum << " vs " << none.ce_sum;
    EXPECT_EQ(std::memcmp(&s.z_sq_sum, &none.z_sq_sum, sizeof(double)), 0) << what;
    std::vector<Parameter> pn = list_parameters(g_none, g_none, model.config(), model.shard());
    std::vector<Parameter> pm = list_parameters(g, g, model.config(), model.shard());
    ASSERT_EQ(pm.size(), 2u + 2u * 11u + 1u);
    double norm = 0;
    for (size_t i = 0; i < pm.size(); ++i) {
      EXPECT_TRUE(same_bits(*pm[i].grad, *pn[i].grad)) << what << ": " << pm[i].name;
      for (int64_t j = 0; j < pm[i].numel(); ++j) norm += double(pm[i].grad->f32()[j]) * pm[i].grad->f32()[j];
    }
    EXPECT_GT(norm, 0.0) << what << ": the gradients must not be trivially equal";
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, RecomputeLayer, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });
INSTANTIATE_TEST_SUITE_P(Configs, RecomputeModel, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Recompute, ModesAreNamedAndAnUnknownOneIsRefused) {
  for (Recompute mode : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    EXPECT_EQ(parse_recompute(recompute_name(mode), "--recompute"), mode);
  }
  EXPECT_THAT(test::input_error([] { parse_recompute("some", "--recompute"); }),
              HasSubstr("--recompute must be none, selective or full, got \"some\""));
}

}  // namespace
}  // namespace olmo2
