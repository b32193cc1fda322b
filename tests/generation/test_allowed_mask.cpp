// A constraint's allowed-token mask in select_tokens (docs/architecture.md §8,
// "Structured outputs"): greedy picks the most likely allowed id, seeded sampling never
// picks a masked one and draws the allowed ids in proportion to their renormalized
// probabilities, and the reported log-probabilities are the raw (unmasked)
// distribution's — each checked against a plain double-precision reference here.
// The tp 2 case is in test_token_selection_mpi.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "runtime/generation/logits_adjustments.h"
#include "runtime/generation/token_selection.h"

namespace olmo2 {
namespace {

constexpr int64_t kVocab = 1000;

ShardSpec whole_vocab() {
  ShardSpec s;
  s.vocab_rows = s.vocab_real = {0, kVocab};
  s.padded_vocab = kVocab;
  return s;
}

std::vector<float> random_logits(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(kVocab);
  for (float& v : x) v = d(rng);
  return x;
}

std::shared_ptr<const std::vector<uint64_t>> mask_of(const std::vector<int32_t>& ids) {
  auto m = std::make_shared<std::vector<uint64_t>>((kVocab + 63) / 64, 0);
  for (int32_t id : ids) (*m)[static_cast<size_t>(id / 64)] |= uint64_t{1} << (id % 64);
  return m;
}

TEST(AllowedMask, SetsMinusInfinityOnMaskedIdsOfTheSliceOnly) {
  std::vector<float> x = {1, 2, 3, 4, 5};
  const std::vector<uint64_t> m = {(uint64_t{1} << 63) | (uint64_t{1} << 1), uint64_t{1} << 2};  // ids 1, 63, 66
  apply_allowed_mask(x, 62, m);  // ids 62 … 66
  EXPECT_TRUE(std::isinf(x[0]) && x[0] < 0);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_TRUE(std::isinf(x[2]) && std::isinf(x[3]));
  EXPECT_EQ(x[4], 5.0f);
  std::vector<float> past = {1, 1};
  apply_allowed_mask(past, 128, m);  // ids past the mask's words: disallowed
  EXPECT_TRUE(std::isinf(past[0]) && std::isinf(past[1]));
}

TEST(AllowedMask, GreedyPicksTheMostLikelyAllowedIdAndReportsRawLogprobs) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> x = random_logits(seed);
    std::mt19937 rng(seed + 100);
    std::vector<int32_t> allowed;
    for (int i = 0; i < 1 + static_cast<int>(seed % 7); ++i) allowed.push_back(static_cast<int32_t>(rng() % kVocab));
    SelectionRequest r;
    r.params = {.temperature = 0.0, .top_k = 0, .top_p = 1.0, .seed = 1};
    r.logprobs = 3;
    r.allowed = mask_of(allowed);
    const SelectedToken t =
        select_tokens({TensorView(const_cast<float*>(x.data()), DType::F32, {kVocab})}, whole_vocab(), {r}, nullptr)[0];
    int32_t best = allowed[0];
    for (int32_t id : allowed) {
      if (x[static_cast<size_t>(id)] > x[static_cast<size_t>(best)] ||
          (x[static_cast<size_t>(id)] == x[static_cast<size_t>(best)] && id < best)) {
        best = id;
      }
    }
    EXPECT_EQ(t.id, best) << seed;
    // Raw log_softmax over the whole vocabulary, in double.
    const double mx = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (float v : x) sum += std::exp(v - mx);
    EXPECT_NEAR(t.logprob, x[static_cast<size_t>(best)] - mx - std::log(sum), 1e-5);
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[0].id, static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin()))
        << "the alternatives are the raw distribution's best, masked or not";
  }
}

TEST(AllowedMask, SeededSamplingDrawsOnlyAllowedIdsInProportion) {
  const std::vector<float> x = random_logits(7);
  const std::vector<int32_t> allowed = {5, 300, 301, 999};
  // Renormalized probabilities at temperature 1 over the allowed ids.
  std::map<int32_t, double> p;
  double z = 0;
  for (int32_t id : allowed) z += std::exp(static_cast<double>(x[static_cast<size_t>(id)]));
  for (int32_t id : allowed) p[id] = std::exp(static_cast<double>(x[static_cast<size_t>(id)])) / z;
  for (const int64_t top_k : {int64_t{0}, int64_t{50}}) {
    std::map<int32_t, int> seen;
    const int draws = 3000;  // one call, a row per draw
    std::vector<TensorView> rows;
    std::vector<SelectionRequest> reqs;
    for (int d = 0; d < draws; ++d) {
      SelectionRequest r;
      r.params = {.temperature = 1.0, .top_k = top_k, .top_p = 1.0, .seed = 11};
      r.draw = static_cast<uint64_t>(d);
      r.allowed = mask_of(allowed);
      rows.push_back(TensorView(const_cast<float*>(x.data()), DType::F32, {kVocab}));
      reqs.push_back(r);
    }
    for (const SelectedToken& t : select_tokens(rows, whole_vocab(), reqs, nullptr)) {
      ASSERT_TRUE(p.count(t.id)) << "masked id " << t.id << " drawn (top_k " << top_k << ")";
      ++seen[t.id];
    }
    for (const auto& [id, q] : p) {  // within 5 standard deviations of the binomial count
      const double sd = std::sqrt(draws * q * (1 - q));
      EXPECT_NEAR(seen[id], draws * q, 5 * sd + 1) << "id " << id << " top_k " << top_k;
    }
  }
}

}  // namespace
}  // namespace olmo2
