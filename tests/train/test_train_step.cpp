// Whole-model gradient check by finite differences, and the loss semantics over
// micro-batches (docs/architecture.md §11.4). Per-op gradient checks are in
// tests/ops/test_backward.cpp; gradients against transformers in tests/golden.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/model/parameters.h"
#include "runtime/train/train_step.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

ModelConfig tiny_config(int64_t kv_heads) {
  ModelConfig c;
  c.vocab_size = 24, c.hidden_size = 16, c.intermediate_size = 20, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = kv_heads, c.head_dim = 4;
  c.max_position_embeddings = 32, c.rms_norm_eps = 1e-6, c.rope_theta = 10000.0;
  return c;
}

/// A tiny model with large weights and norm gains away from 1, so that every term of
/// the gradient is visible above fp32 rounding.
Olmo2Model tiny_model(int64_t kv_heads, uint64_t seed) {
  Olmo2Model m = Olmo2Model::random(tiny_config(kv_heads), seed, 0.3f);
  ModelWeights& w = m.mutable_weights();
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_real_distribution<float> gain(0.5f, 1.5f);
  auto jitter = [&](Tensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = gain(rng);
  };
  for (LayerWeights& l : w.layers) {
    jitter(l.q_norm), jitter(l.k_norm), jitter(l.post_attention_layernorm), jitter(l.post_feedforward_layernorm);
  }
  jitter(w.norm);
  return m;
}

std::vector<Sample> samples_of(std::vector<std::vector<int32_t>> ids, std::vector<std::vector<int32_t>> labels) {
  std::vector<Sample> out;
  for (size_t i = 0; i < ids.size(); ++i) out.push_back(Sample{ids[i], labels[i], 0});
  return out;
}

const std::vector<Sample> kBatch = samples_of({{3, 7, 1, 20, 9, 4}, {11, 2, 8}},
                                              {{7, 1, -100, 9, 4, 23}, {2, 8, 5}});

double loss_of(const Olmo2Model& m, float z) {
  const LossSums s = compute_loss(m, kBatch, z);
  return (s.ce_sum + z * s.z_sq_sum) / static_cast<double>(s.count);
}

class WholeModelGradient : public ::testing::TestWithParam<int64_t> {};

// For every parameter tensor, the directional derivative along a random unit direction
// by central differences (step 1e-2; the loss is evaluated in fp32, so the difference
// carries ~1e-5 of rounding noise) against <grad, direction>.
TEST_P(WholeModelGradient, MatchesCentralDifferencesForEveryParameter) {
  Olmo2Model m = tiny_model(GetParam(), 5);
  const float z = 0.05f;  // large, so the Z-loss term is tested too
  ModelWeights grads = zeros_like_weights(m.weights());
  const LossSums s = forward_backward(m, grads, kBatch, z, 1.0f / 8.0f);
  ASSERT_EQ(s.count, 8);
  std::vector<Parameter> params = list_parameters(m.mutable_weights(), grads, m.config(), m.shard());
  ASSERT_EQ(params.size(), 2u + 2u * 11u + 1u);
  std::mt19937 rng(99);
  std::normal_distribution<float> normal;
  const double eps = 1e-2;
  for (Parameter& p : params) {
    std::vector<float> dir(static_cast<size_t>(p.numel()));
    double norm = 0, analytic = 0;
    for (float& d : dir) d = normal(rng), norm += static_cast<double>(d) * d;
    for (size_t i = 0; i < dir.size(); ++i) {
      dir[i] = static_cast<float>(dir[i] / std::sqrt(norm));
      analytic += static_cast<double>(dir[i]) * p.grad->f32()[i];
    }
    std::vector<float> saved(p.value->f32(), p.value->f32() + p.numel());
    auto shifted = [&](double sign) {
      for (size_t i = 0; i < dir.size(); ++i) p.value->f32()[i] = static_cast<float>(saved[i] + sign * eps * dir[i]);
      return loss_of(m, z);
    };
    const double numeric = (shifted(1) - shifted(-1)) / (2 * eps);
    std::copy(saved.begin(), saved.end(), p.value->f32());
    EXPECT_NEAR(analytic, numeric, 2e-3 * std::fabs(numeric) + 5e-4)
        << p.name << ": analytic " << analytic << " numeric " << numeric;
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, WholeModelGradient, ::testing::Values(4, 2, 1));

// docs/architecture.md §11.4: micro-batches with different target counts. The step loss and the
// gradient are the token-weighted mean over the whole batch, so splitting a batch into
// micro-batches changes nothing (fp32, 1e-6).
TEST(LossOverMicroBatches, TokenWeightedMeanNotMeanOfMeans) {
  const Olmo2Model m = tiny_model(2, 7);
  // A: one target; B: three targets, the rest ignored.
  const std::vector<Sample> a = samples_of({{1, 2, 3, 4}}, {{-100, -100, 5, -100}});
  const std::vector<Sample> b = samples_of({{6, 7, 8, 9}}, {{10, 11, -100, 12}});
  std::vector<Sample> both = a;
  both.push_back(b[0]);
  const float z = 1e-5f;
  ModelWeights g_acc = zeros_like_weights(m.weights()), g_one = zeros_like_weights(m.weights());
  LossSums acc = forward_backward(m, g_acc, a, z, 0.25f);
  const LossSums sb = forward_backward(m, g_acc, b, z, 0.25f);
  const LossSums sa = acc;
  acc += sb;
  const LossSums one = forward_backward(m, g_one, both, z, 0.25f);
  ASSERT_EQ(sa.count, 1);
  ASSERT_EQ(sb.count, 3);
  ASSERT_EQ(acc.count, 4);
  const double token_weighted = acc.ce_sum / 4.0;
  const double mean_of_means = (sa.ce_sum / 1.0 + sb.ce_sum / 3.0) / 2.0;
  EXPECT_NEAR(one.ce_sum / 4.0, token_weighted, 1e-6 * token_weighted);
  EXPECT_GT(std::fabs(token_weighted - mean_of_means), 1e-3) << "the batch must tell the two apart";
  std::vector<Parameter> pa = list_parameters(const_cast<ModelWeights&>(m.weights()), g_acc, m.config(), m.shard());
  std::vector<Parameter> po = list_parameters(const_cast<ModelWeights&>(m.weights()), g_one, m.config(), m.shard());
  for (size_t i = 0; i < pa.size(); ++i) {
    double scale = 0, diff = 0;
    for (int64_t j = 0; j < pa[i].numel(); ++j) {
      scale = std::max(scale, static_cast<double>(std::fabs(po[i].grad->f32()[j])));
      diff = std::max(diff, static_cast<double>(::olmo2::test::abs_diff(pa[i].grad->f32()[j], po[i].grad->f32()[j])));
    }
    EXPECT_LE(diff, 1e-6 * scale + 1e-9) << pa[i].name;
  }
}

TEST(LossOverMicroBatches, RefusesBadSamples) {
  const Olmo2Model m = tiny_model(2, 7);
  ModelWeights g = zeros_like_weights(m.weights());
  EXPECT_THROW(forward_backward(m, g, samples_of({{1, 2}}, {{2}}), 0, 1), InputError);
  EXPECT_THROW(forward_backward(m, g, samples_of({{1, 24}}, {{2, 3}}), 0, 1), InputError);
  EXPECT_THROW(forward_backward(m, g, samples_of({{1, 2}}, {{2, 24}}), 0, 1), InputError);
  EXPECT_THROW(forward_backward(m, g, samples_of({{}}, {{}}), 0, 1), InputError);
}

}  // namespace
}  // namespace olmo2
