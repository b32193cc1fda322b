// Deterministic OLMo 2 initialisation (docs/architecture.md §7): truncated normal
// statistics, norms at 1, values a pure function of (seed, name, global index) so sharded
// ranks build exact slices; known answers from tests/model/make_init_fixtures.py
// (docs/architecture.md §10).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numbers>
#include <set>
#include <vector>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runtime/model/init.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using json = nlohmann::json;

/// A parameter owning its tensors.
struct Owned {
  Tensor value, grad;
  Parameter p;
  Owned(std::string name, std::vector<int64_t> full, std::vector<int64_t> local, int shard_dim = -1,
        int64_t begin = 0, int64_t end = 0)
      : value(Tensor::zeros(local)), grad(Tensor::zeros(local)) {
    p.name = std::move(name);
    p.full_shape = std::move(full);
    p.value = &value, p.grad = &grad;
    p.shard_dim = shard_dim, p.shard_begin = begin, p.shard_end = end;
  }
  float at(int64_t r, int64_t c) const { return value.f32()[r * value.shape()[1] + c]; }
};

const std::string kUp = "model.layers.0.mlp.up_proj.weight";

/// tests/model/fixtures/init_known_answers.json, written by tests/model/make_init_fixtures.py:
/// a pure-Python transcription of the algorithm init.h documents (and of
/// Parameter::global_index as parameters.h documents it), independent of this C++.
const json& known_answers() {
  static const json j = [] {
    const std::string path = test::source_path("tests/model/fixtures/init_known_answers.json");
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path + " (tests/model/make_init_fixtures.py writes it)");
    return json::parse(in);
  }();
  return j;
}

uint64_t hex(const json& s) { return std::stoull(s.get<std::string>(), nullptr, 16); }

TEST(Init, KnownAnswersOfTheDocumentedAlgorithm) {
  const json& fx = known_answers();
  for (const auto& [s, h] : fx.at("hashes").at("fnv1a64").items()) EXPECT_EQ(fnv1a64(s), hex(h)) << "fnv1a64(\"" << s << "\")";
  for (const auto& [x, h] : fx.at("hashes").at("splitmix64_mix").items()) {
    EXPECT_EQ(splitmix64_mix(hex(json(x))), hex(h)) << "splitmix64_mix(" << x << ")";
  }
  std::set<uint64_t> seeds;
  std::set<std::string> names;
  int rejected = 0, rejected_twice = 0;
  for (const json& v : fx.at("values")) {
    const uint64_t seed = v.at("seed").get<uint64_t>();
    const std::string name = v.at("name");
    const int64_t g = v.at("g");
    const double std = v.at("std"), want = v.at("value");
    const int attempts = v.at("attempts");
    seeds.insert(seed), names.insert(name);
    rejected += attempts > 1, rejected_twice += attempts > 2;
    // 4 ulps: the same double up to the last bits of the platform's log and cos.
    EXPECT_DOUBLE_EQ(init_value(seed, name, g, std), want)
        << "seed " << seed << " " << name << " g " << g << " std " << std << " (" << attempts
        << " attempts; without the rejection it would be " << std * v.at("first_z").get<double>() << ")";
  }
  // What the fixture must cover for the comparison above to mean something.
  EXPECT_GE(seeds.size(), 4u);
  EXPECT_TRUE(seeds.count(std::numeric_limits<uint64_t>::max())) << "a seed with every bit set";
  EXPECT_GE(names.size(), 4u);
  EXPECT_GE(rejected, 8) << "elements whose first draw has |z| > 3";
  EXPECT_GE(rejected_twice, 1) << "an element whose first two draws are rejected";
}

TEST(Init, ShardsHoldTheKnownAnswersAtTheirGlobalIndices) {
  const json& shards = known_answers().at("shards");
  ASSERT_GE(shards.size(), 3u);
  int padding = 0;
  for (const json& s : shards) {
    const std::vector<int64_t> full = s.at("full_shape"), local = s.at("local_shape");
    const std::string name = s.at("name");
    Owned o(name, full, local, s.at("shard_dim"), s.at("shard_begin"), s.at("shard_end"));
    init_parameter(o.p, s.at("seed").get<uint64_t>(), s.at("std").get<double>());
    const std::vector<int64_t> gi = s.at("global_index");
    const std::vector<double> want = s.at("f32");
    ASSERT_EQ(static_cast<int64_t>(want.size()), o.value.numel()) << name;
    for (int64_t i = 0; i < o.value.numel(); ++i) {
      const size_t k = static_cast<size_t>(i);
      EXPECT_EQ(o.p.global_index(i), gi[k]) << name << " local element " << i;
      EXPECT_EQ(o.value.f32()[i], static_cast<float>(want[k])) << name << " local element " << i << " (global " << gi[k] << ")";
      padding += gi[k] < 0;
    }
  }
  EXPECT_GT(padding, 0) << "a vocab shard with padding rows";
}

TEST(Init, NormWeightsAreOne) {
  for (const char* name : {"model.layers.3.self_attn.q_norm.weight", "model.layers.3.self_attn.k_norm.weight",
                           "model.layers.3.post_attention_layernorm.weight",
                           "model.layers.3.post_feedforward_layernorm.weight", "model.norm.weight"}) {
    Owned o(name, {16}, {16});
    init_parameter(o.p, 7);
    for (int i = 0; i < 16; ++i) ASSERT_EQ(o.value.f32()[i], 1.0f) << name;
  }
  EXPECT_FALSE(is_norm_weight("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(is_norm_weight("lm_head.weight"));
}

struct Stats {
  double mean = 0, std = 0, max_abs = 0;
};

Stats stats(const Tensor& t) {
  Stats s;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) s.mean += t.f32()[i];
  s.mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const double d = t.f32()[i] - s.mean;
    s.std += d * d;
    s.max_abs = std::max(s.max_abs, std::fabs(static_cast<double>(t.f32()[i])));
  }
  s.std = std::sqrt(s.std / static_cast<double>(n - 1));
  return s;
}

// Standard deviation of N(0, 1) truncated at ±3: sqrt(1 − 2·3·φ(3)/(2Φ(3) − 1)).
const double kTruncFactor = std::sqrt(1 - 6 * std::exp(-4.5) / std::sqrt(2 * std::numbers::pi) / std::erf(3 / std::sqrt(2.0)));

TEST(Init, TruncatedNormalStatistics) {
  EXPECT_NEAR(kTruncFactor, 0.9866, 1e-4);
  // [64, 32]: 2048 values. Standard errors: mean 0.02/√2048 ≈ 4.4e-4, std ≈ 3e-4;
  // bounds at ~3 standard errors, far from std 0.01 or 0.03.
  Owned o(kUp, {64, 32}, {64, 32});
  init_parameter(o.p, 1234, 0.02);
  const Stats s = stats(o.value);
  EXPECT_NEAR(s.mean, 0.0, 1.5e-3);
  EXPECT_NEAR(s.std, 0.02 * kTruncFactor, 1e-3);
  EXPECT_LE(s.max_abs, 3 * 0.02 * (1 + 1e-6)) << "nothing beyond 3σ";
  EXPECT_GT(s.max_abs, 2.5 * 0.02) << "the tails are there up to the cut";
  // 1M values: std standard error ≈ 1.4e-5, so 6e-5 separates the truncated 0.019732
  // from an untruncated 0.02 (and from a cut at ±2σ, 0.0176).
  Owned big("model.layers.1.mlp.down_proj.weight", {1024, 1024}, {1024, 1024});
  init_parameter(big.p, 99, 0.02);
  const Stats b = stats(big.value);
  EXPECT_NEAR(b.mean, 0.0, 1e-4);
  EXPECT_NEAR(b.std, 0.02 * kTruncFactor, 6e-5);
  EXPECT_LE(b.max_abs, 3 * 0.02 * (1 + 1e-6));
  EXPECT_GT(b.max_abs, 2.99 * 0.02);
}

TEST(Init, PureFunctionOfSeedNameAndIndex) {
  Owned a(kUp, {8, 8}, {8, 8}), b(kUp, {8, 8}, {8, 8}), c(kUp, {8, 8}, {8, 8}),
      d("model.layers.0.mlp.gate_proj.weight", {8, 8}, {8, 8});
  init_parameter(a.p, 5);
  init_parameter(b.p, 5);
  init_parameter(c.p, 6);
  init_parameter(d.p, 5);
  EXPECT_EQ(0, std::memcmp(a.value.f32(), b.value.f32(), 64 * 4));
  int same_seed = 0, same_name = 0;
  for (int i = 0; i < 64; ++i) {
    same_seed += a.value.f32()[i] == c.value.f32()[i];
    same_name += a.value.f32()[i] == d.value.f32()[i];
  }
  EXPECT_EQ(same_seed, 0);
  EXPECT_EQ(same_name, 0);
  // The std scales the same draws.
  Owned e(kUp, {8, 8}, {8, 8});
  init_parameter(e.p, 5, 0.04);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(e.value.f32()[i], static_cast<float>(2.0 * init_value(5, kUp, i, 0.02)));
  EXPECT_THAT(test::input_error([&] { init_parameter(e.p, 5, -0.02); }), ::testing::HasSubstr("-0.02"));
}

TEST(Init, RowShardIsTheSliceOfTheUnshardedInit) {
  const std::string name = "model.layers.2.self_attn.q_proj.weight";
  Owned full(name, {6, 4}, {6, 4}), shard(name, {6, 4}, {3, 4}, 0, 2, 5);
  init_parameter(full.p, 42);
  init_parameter(shard.p, 42);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(shard.at(r, c), full.at(r + 2, c)) << r << "," << c;
}

TEST(Init, ColumnShardIsTheSliceOfTheUnshardedInit) {
  const std::string name = "model.layers.2.self_attn.o_proj.weight";
  Owned full(name, {6, 4}, {6, 4}), shard(name, {6, 4}, {6, 2}, 1, 1, 3);
  init_parameter(full.p, 42);
  init_parameter(shard.p, 42);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 2; ++c) EXPECT_EQ(shard.at(r, c), full.at(r, c + 1)) << r << "," << c;
}

TEST(Init, PaddedVocabRowsAreZeroAndRealRowsMatch) {
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    // Vocab 5, padded to 6, this rank rows [3, 6): rows 3, 4 real, row 5 padding.
    Owned full(name, {5, 4}, {5, 4}), shard(name, {5, 4}, {3, 4}, 0, 3, 6);
    init_parameter(full.p, 3);
    init_parameter(shard.p, 3);
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(shard.at(0, c), full.at(3, c));
      EXPECT_EQ(shard.at(1, c), full.at(4, c));
      EXPECT_EQ(shard.at(2, c), 0.0f) << "padding row";
    }
    // And element by element against the documented formula.
    for (int64_t i = 0; i < shard.value.numel(); ++i) {
      const int64_t g = shard.p.global_index(i);
      EXPECT_EQ(shard.value.f32()[i], g < 0 ? 0.0f : static_cast<float>(init_value(3, name, g, 0.02))) << i;
    }
  }
}

TEST(Init, InitParametersCoversEveryParameter) {
  Owned a(kUp, {4, 4}, {4, 4}), n("model.norm.weight", {4}, {4});
  std::vector<Parameter> ps = {a.p, n.p};
  init_parameters(ps, 11, 0.02);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(n.value.f32()[i], 1.0f);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(a.value.f32()[i], static_cast<float>(init_value(11, kUp, i, 0.02)));
}

TEST(FillNormal, IsAStandardNormalScaledByStdAndAFunctionOfKeyAndIndex) {
  constexpr int64_t n = 1 << 20;
  std::vector<float> a(n), b(n - 1), c(n);
  fill_normal(a.data(), n, 42, 0.5f);
  fill_normal(b.data(), n - 1, 42, 0.5f);  // odd count: the same values, one fewer
  fill_normal(c.data(), n, 43, 0.5f);
  // The same values up to rounding: a block's tail may run the scalar code where a longer
  // fill runs the vector code (fill_normal's contract: relative error < 1e-6).
  for (int64_t i = 0; i < n - 1; ++i) ASSERT_NEAR(a[i], b[i], 2e-6 * std::fabs(a[i]) + 1e-12) << i;
  int64_t same = 0;
  double sum = 0, sq = 0, fourth = 0;
  int64_t in1 = 0, in2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    same += a[i] == c[i];
    ASSERT_TRUE(std::isfinite(a[i])) << i;
    const double z = a[i] / 0.5;
    sum += z, sq += z * z, fourth += z * z * z * z;
    in1 += std::fabs(z) < 1, in2 += std::fabs(z) < 2;
  }
  EXPECT_LT(same, 16);  // another key: other values
  // Moments and mass of N(0, 1) within ~5 standard errors of 2^20 samples.
  EXPECT_NEAR(sum / n, 0.0, 0.005);
  EXPECT_NEAR(sq / n, 1.0, 0.007);
  EXPECT_NEAR(fourth / n, 3.0, 0.04);
  EXPECT_NEAR(double(in1) / n, 0.682689, 0.0025);
  EXPECT_NEAR(double(in2) / n, 0.954500, 0.0012);
}

}  // namespace
}  // namespace olmo2
