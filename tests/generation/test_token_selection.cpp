// select_tokens on one process: the same tokens as an independent reference — a plain
// full sort of the vocabulary and the documented draw (runtime/generation/sampling.h) —
// over vocabularies up to OLMo 2's 100352 ids, and log-probabilities as a
// double-precision log_softmax. The multi-rank merge is in
// tests/generation/test_token_selection_mpi.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "runtime/generation/sampling.h"
#include "runtime/generation/token_selection.h"

namespace olmo2 {
namespace {

constexpr int64_t kVocab = 1000;

ShardSpec whole_vocab(int64_t v) {
  ShardSpec s;
  s.vocab_rows = s.vocab_real = {0, v};
  s.padded_vocab = v;
  return s;
}

std::vector<float> random_logits(std::mt19937& rng, int64_t n, float sd = 3.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

SelectionRequest request(double temperature, int64_t top_k, double top_p, uint64_t seed,
                         uint64_t draw, int32_t logprobs = 0) {
  SelectionRequest r;
  r.params = {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed};
  r.draw = draw;
  r.logprobs = logprobs;
  return r;
}

/// log_softmax of x in double.
std::vector<double> log_softmax(const std::vector<float>& x) {
  double mx = -INFINITY;
  for (float v : x) mx = std::max(mx, static_cast<double>(v));
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v) - mx);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<double>(x[i]) - mx - std::log(s);
  return out;
}

/// Ids most likely first, ties by lower id.
std::vector<int32_t> ranked(const std::vector<float>& x) {
  std::vector<int32_t> ids(x.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  return ids;
}

/// The documented draw: splitmix64 of seed + (draw + 1)·0x9e3779b97f4a7c15, the top 53
/// bits as u ∈ [0, 1) (Steele, Lea, Flood 2014), written here from the description.
double reference_uniform(uint64_t seed, uint64_t draw) {
  uint64_t z = seed + (draw + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / 9007199254740992.0;
}

/// An independent reference of the documented sampling: greedy = first argmax;
/// otherwise the whole vocabulary sorted once (most likely first, lower id on ties),
/// cut to top_k, probabilities exp((x − max)/T) in double with their total summed in id
/// order (whole vocabulary) or in sorted order (top_k), cut to the smallest prefix
/// reaching top_p, and the first candidate whose cumulative probability exceeds
/// u · (kept mass). Returns the id and its rank in the sorted order.
std::pair<int32_t, size_t> reference_pick(const std::vector<float>& x, const SamplingParams& p, uint64_t draw) {
  const size_t n = x.size();
  if (p.temperature == 0) {
    return {static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin()), 0};
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) order.resize(static_cast<size_t>(p.top_k));
  const double mx = x[static_cast<size_t>(order[0])];
  std::vector<double> prob(n, 0.0);
  for (int32_t id : order) prob[static_cast<size_t>(id)] = std::exp((x[static_cast<size_t>(id)] - mx) / p.temperature);
  double total = 0;
  if (p.top_k > 0) {
    for (int32_t id : order) total += prob[static_cast<size_t>(id)];
  } else {
    for (double q : prob) total += q;
  }
  size_t keep = order.size();
  double kept = total;
  if (p.top_p < 1) {
    double cum = 0, mass = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      cum += prob[static_cast<size_t>(order[i])] / total;
      mass += prob[static_cast<size_t>(order[i])];
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    kept = p.top_k > 0 ? 0.0 : mass;
    if (p.top_k > 0) {
      for (size_t i = 0; i < keep; ++i) kept += prob[static_cast<size_t>(order[i])];
    }
  }
  const double u = reference_uniform(p.seed, draw) * kept;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += prob[static_cast<size_t>(order[i])];
    if (u < cum) return {order[i], i};
  }
  return {order[keep - 1], keep - 1};
}

struct Mode {
  const char* name;
  SamplingParams params;
};
const Mode kModes[] = {
    {"greedy", {.temperature = 0.0, .top_k = 0, .top_p = 1.0, .seed = 1}},
    {"t0.7-top_k50", {.temperature = 0.7, .top_k = 50, .top_p = 1.0, .seed = 2}},
    {"top_p0.9", {.temperature = 1.0, .top_k = 0, .top_p = 0.9, .seed = 3}},
    {"full-vocab", {.temperature = 1.3, .top_k = 0, .top_p = 1.0, .seed = 4}},
    {"top_k2000-top_p0.5", {.temperature = 0.9, .top_k = 2000, .top_p = 0.5, .seed = 5}},
    {"t0.3-top_p0.99", {.temperature = 0.3, .top_k = 0, .top_p = 0.99, .seed = 6}},
};

TEST(TokenSelection, EqualsAPlainSortReferenceInEveryModeOverLargeVocabularies) {
  std::mt19937 rng(11);
  constexpr size_t kModesN = std::size(kModes);
  for (const int64_t vocab : {int64_t{1000}, int64_t{100352}}) {
    const ShardSpec shard = whole_vocab(vocab);
    std::vector<std::set<int32_t>> distinct(kModesN);
    size_t deepest = 0;  // the largest rank drawn without top_k: past the first sorted chunk of 64
    const uint64_t draws = vocab > 1000 ? 12 : 120;
    for (uint64_t draw = 0; draw < draws; ++draw) {
      // One call selects for every mode at once, each row with its own logits; flat
      // logits (sd 0.4) put the draw deep into a large vocabulary.
      std::vector<std::vector<float>> logits;
      std::vector<TensorView> rows;
      std::vector<SelectionRequest> reqs;
      for (const Mode& m : kModes) {
        logits.push_back(random_logits(rng, vocab, draw % 2 ? 0.4f : 2.0f));
        reqs.push_back(request(m.params.temperature, m.params.top_k, m.params.top_p, m.params.seed, draw));
      }
      for (const auto& l : logits) rows.push_back(host_view(l));
      const std::vector<SelectedToken> got = select_tokens(rows, shard, reqs, nullptr);
      ASSERT_EQ(got.size(), kModesN);
      for (size_t i = 0; i < kModesN; ++i) {
        const auto [want, rank] = reference_pick(logits[i], kModes[i].params, draw);
        ASSERT_EQ(got[i].id, want) << kModes[i].name << " vocab " << vocab << " draw " << draw;
        if (kModes[i].params.top_k == 0 && kModes[i].params.temperature > 0) deepest = std::max(deepest, rank);
        distinct[i].insert(got[i].id);
        EXPECT_TRUE(got[i].top.empty());
      }
    }
    // The sampling modes really sample, and whole-vocabulary draws went past the first
    // sorted chunk (64 candidates) into the doubling ones.
    for (size_t i = 1; i < kModesN; ++i) EXPECT_GT(distinct[i].size(), draws / 4) << kModes[i].name;
    EXPECT_GT(deepest, 256u) << "vocab " << vocab;
  }
}

TEST(TokenSelection, LogprobsAreLogSoftmaxOfTheRawLogits) {
  std::mt19937 rng(12);
  const ShardSpec shard = whole_vocab(kVocab);
  for (const Mode& m : kModes) {
    for (uint64_t draw = 0; draw < 20; ++draw) {
      const std::vector<float> x = random_logits(rng, kVocab);
      const std::vector<double> lp = log_softmax(x);
      const std::vector<int32_t> order = ranked(x);
      const SelectionRequest r =
          request(m.params.temperature, m.params.top_k, m.params.top_p, m.params.seed, draw, 5);
      const SelectedToken t = select_tokens({host_view(x)}, shard, {r}, nullptr)[0];
      ASSERT_EQ(t.id, reference_pick(x, m.params, draw).first) << m.name;
      EXPECT_NEAR(t.logprob, lp[static_cast<size_t>(t.id)], 1e-5) << m.name;
      ASSERT_EQ(t.top.size(), 5u) << m.name;
      for (size_t j = 0; j < 5; ++j) {
        EXPECT_EQ(t.top[j].id, order[j]) << m.name << " rank " << j;
        EXPECT_NEAR(t.top[j].logit, lp[static_cast<size_t>(order[j])], 1e-5) << m.name;
      }
    }
  }
  // More alternatives asked than top_k keeps: all reported, the draw still from top_k.
  const std::vector<float> x = random_logits(rng, kVocab);
  const std::vector<int32_t> order = ranked(x);
  const SelectedToken t =
      select_tokens({host_view(x)}, shard, {request(1.0, 2, 1.0, 9, 0, 8)}, nullptr)[0];
  EXPECT_TRUE(t.id == order[0] || t.id == order[1]);
  ASSERT_EQ(t.top.size(), 8u);
  for (size_t j = 0; j < 8; ++j) EXPECT_EQ(t.top[j].id, order[j]);
}

TEST(TokenSelection, GreedyTiesPickTheLowestId) {
  std::mt19937 rng(13);
  std::vector<float> x = random_logits(rng, kVocab);
  const float top = *std::max_element(x.begin(), x.end()) + 1.0f;
  x[700] = x[3] = x[999] = top;
  const ShardSpec shard = whole_vocab(kVocab);
  const SelectedToken t = select_tokens({host_view(x)}, shard, {request(0, 0, 1, 0, 0, 3)}, nullptr)[0];
  EXPECT_EQ(t.id, 3);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].id, 3);
  EXPECT_EQ(t.top[1].id, 700);
  EXPECT_EQ(t.top[2].id, 999);
  EXPECT_EQ(t.top[0].logit, t.top[2].logit);
  const SelectedToken plain =
      select_tokens({host_view(x)}, shard, {request(0, 0, 1, 0, 0)}, nullptr)[0];
  EXPECT_EQ(plain.id, 3);
  // top_k 1 sampling is greedy too, whatever the draw.
  for (uint64_t d = 0; d < 10; ++d) {
    EXPECT_EQ(select_tokens({host_view(x)}, shard, {request(1.0, 1, 1.0, 5, d)}, nullptr)[0].id, 3);
  }
}

TEST(TokenSelection, SameSeedAndDrawSameTokenDifferentDrawsDiffer) {
  std::mt19937 rng(14);
  const std::vector<float> x = random_logits(rng, kVocab, 0.5f);  // flat: many likely ids
  const ShardSpec shard = whole_vocab(kVocab);
  std::set<int32_t> seen;
  for (uint64_t d = 0; d < 30; ++d) {
    const int32_t a =
        select_tokens({host_view(x)}, shard, {request(1.0, 0, 1.0, 77, d)}, nullptr)[0].id;
    const int32_t b =
        select_tokens({host_view(x)}, shard, {request(1.0, 0, 1.0, 77, d)}, nullptr)[0].id;
    EXPECT_EQ(a, b);
    seen.insert(a);
  }
  EXPECT_GT(seen.size(), 20u);
}

}  // namespace
}  // namespace olmo2
