// rope_frequencies against transformers, bit for bit: inv_freq and the cos/sin scaling of
// plain RoPE and YaRN (docs/architecture.md §3). Reference values:
// tests/model/fixtures/rope_frequencies.json, written by tests/model/make_rope_fixtures.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/model/rope_frequencies.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using nlohmann::json;

json fixtures() {
  const std::string path = test::source_path("tests/model/fixtures/rope_frequencies.json");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path + " (tests/model/make_rope_fixtures.py writes it)");
  return json::parse(in);
}

/// The parameters transformers resolved (standardize_rope_params' defaults filled in).
RopeParameters from_resolved(const json& r) {
  RopeParameters p;
  p.type = r.at("rope_type").get<std::string>();
  p.theta = r.at("rope_theta").get<double>();
  if (p.type == "yarn") {
    p.factor = r.at("factor").get<double>();
    p.original_max_position_embeddings = r.at("original_max_position_embeddings").get<int64_t>();
    if (r.contains("attention_factor")) p.attention_factor = r["attention_factor"].get<double>();
    p.beta_fast = r.value("beta_fast", 32.0);
    p.beta_slow = r.value("beta_slow", 1.0);
    p.truncate = r.value("truncate", true);
  }
  return p;
}

TEST(RopeFrequencies, MatchesTransformersBitForBit) {
  const json f = fixtures();
  ASSERT_GE(f["cases"].size(), 20u);
  int yarn = 0;
  size_t exact = 0;
  for (const json& c : f["cases"]) {
    const std::string name = c["name"];
    const RopeParameters p = from_resolved(c["resolved"]);
    yarn += p.type == "yarn";
    const ops::RopeFrequencies got = rope_frequencies(p, c["head_dim"].get<int>());
    const auto& want = c["inv_freq_bits"];
    ASSERT_EQ(got.inv_freq.size(), want.size()) << name;
    // Where PyTorch's own f32 pow missed the correctly rounded power (its vectorized pow
    // is within 1 ulp; see make_rope_fixtures.py) ours, correctly rounded, may differ by
    // what that ulp becomes: at most 2 ulps. Every other entry is bit for bit.
    std::set<size_t> loose;
    for (const json& i : c["pow_not_correctly_rounded"]) loose.insert(i.get<size_t>());
    for (size_t i = 0; i < want.size(); ++i) {
      const uint32_t w = want[i].get<uint32_t>(), g = std::bit_cast<uint32_t>(got.inv_freq[i]);
      const int64_t ulps = static_cast<int64_t>(g) - static_cast<int64_t>(w);
      if (loose.count(i)) {
        EXPECT_LE(std::abs(ulps), 2) << name << " inv_freq[" << i << "]";
        continue;
      }
      EXPECT_EQ(g, w) << name << " inv_freq[" << i << "] = " << got.inv_freq[i] << ", transformers "
                      << std::bit_cast<float>(w) << " (" << ulps << " ulps)";
    }
    exact += want.size() - loose.size();
    // The model multiplies f32 cos/sin by the Python float: the f32 rounding of it.
    EXPECT_EQ(got.attention_scaling, static_cast<float>(c["attention_scaling"].get<double>())) << name;
  }
  EXPECT_GE(yarn, 10);
  EXPECT_GE(exact, 500u);  // almost every entry is compared bit for bit
}

RopeParameters plain(double theta) {
  RopeParameters p;
  p.theta = theta;
  return p;
}

RopeParameters yarn(double theta, double factor, int64_t original, std::optional<double> attention_factor = {}) {
  RopeParameters p = plain(theta);
  p.type = "yarn";
  p.factor = factor;
  p.original_max_position_embeddings = original;
  p.attention_factor = attention_factor;
  return p;
}

TEST(RopeFrequencies, ReleasedValuesAreWhatYarnPromises) {
  // Independent of the fixtures: the released 7B full-attention RoPE (head_dim 128) keeps
  // its fastest frequency (extrapolation), divides its slowest by the factor
  // (interpolation), and scales cos/sin by attention_factor.
  RopeParameters p = yarn(500000, 8, 8192, 1.2079441541679836);
  const ops::RopeFrequencies y = rope_frequencies(p, 128);
  const ops::RopeFrequencies d = rope_frequencies(plain(500000), 128);
  ASSERT_EQ(y.inv_freq.size(), 64u);
  EXPECT_EQ(y.inv_freq[0], 1.0f);
  EXPECT_EQ(d.inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(y.inv_freq[63], d.inv_freq[63] / 8);
  EXPECT_NE(y.inv_freq[30], d.inv_freq[30]);  // inside the ramp: blended
  EXPECT_FLOAT_EQ(y.attention_scaling, 1.2079442f);
  EXPECT_EQ(d.attention_scaling, 1.0f);
  p.attention_factor.reset();  // 0.1·ln 8 + 1
  EXPECT_FLOAT_EQ(rope_frequencies(p, 128).attention_scaling, static_cast<float>(0.1 * std::log(8.0) + 1));
}

TEST(RopeFrequencies, RefusesBadInput) {
  auto error_of = [](RopeParameters p, int hd) -> std::string {
    try {
      rope_frequencies(p, hd);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  using ::testing::HasSubstr;
  EXPECT_THAT(error_of(plain(10000), 7), HasSubstr("head_dim, got 7"));
  EXPECT_THAT(error_of(plain(10000), 0), HasSubstr("head_dim, got 0"));
  RopeParameters linear = plain(10000);
  linear.type = "linear";
  EXPECT_THAT(error_of(linear, 8), HasSubstr("\"linear\""));
  EXPECT_THAT(error_of(plain(0), 8), HasSubstr("rope_theta"));
  EXPECT_THAT(error_of(yarn(1e4, 0.5, 16), 8), HasSubstr("factor must be ≥ 1, got 0.5"));
  EXPECT_THAT(error_of(yarn(1e4, 2, 0), 8), HasSubstr("original_max_position_embeddings must be positive, got 0"));
  RopeParameters betas = yarn(1e4, 2, 16);
  betas.beta_fast = 1, betas.beta_slow = 2;
  EXPECT_THAT(error_of(betas, 8), HasSubstr("beta_fast 1, beta_slow 2"));
}

}  // namespace
}  // namespace olmo2
