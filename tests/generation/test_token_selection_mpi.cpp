// select_tokens over a vocab-parallel TP group of 2 ranks against the single-process
// call on the whole logits: same ids, same log-probabilities; and with logit_bias,
// penalties, min_tokens bans, min_p and target rows (prompt logprobs) against PyTorch
// (tests/generation/fixtures/selection.*), each rank adjusting its own half. Run under
// mpirun -np 2.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "parallel/mpi_communicator.h"
#include "runtime/generation/token_selection.h"
#include "tests/generation/selection_fixture.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2 {
namespace {

using parallel::test::world_rank;

std::unique_ptr<parallel::MpiCommunicator> tp_group() {
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  return std::make_unique<parallel::MpiCommunicator>(dup, "tp", 60.0);
}

SelectionRequest request(double temperature, int64_t top_k, double top_p, uint64_t seed,
                         uint64_t draw, int32_t logprobs) {
  SelectionRequest r;
  r.params = {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed};
  r.draw = draw;
  r.logprobs = logprobs;
  return r;
}

/// Rank r of 2 holds rows [r·padded/2, (r+1)·padded/2) of a vocabulary of `real` ids
/// (real ≤ padded: the last rank's trailing rows are padding).
ShardSpec half(int rank, int64_t real, int64_t padded) {
  ShardSpec s;
  s.vocab_rows = {rank * padded / 2, (rank + 1) * padded / 2};
  s.vocab_real = {s.vocab_rows.begin, std::min(s.vocab_rows.end, real)};
  s.padded_vocab = padded;
  return s;
}

ShardSpec whole(int64_t real) {
  ShardSpec s;
  s.vocab_rows = s.vocab_real = {0, real};
  s.padded_vocab = real;
  return s;
}

/// Every request kind, several draws, several rows in one call; `logits` (the same on
/// every rank) holds `rows` rows of `padded` floats, padding rows set to a huge value
/// that must never be chosen.
void check_layout(int64_t real, int64_t padded, std::vector<float> logits, int rows) {
  auto tp = tp_group();
  const int rank = tp->rank();
  const ShardSpec mine = half(rank, real, padded);
  for (int i = 0; i < rows; ++i) {
    for (int64_t j = real; j < padded; ++j) logits[static_cast<size_t>(i * padded + j)] = 1e9f;
  }
  std::vector<SelectionRequest> reqs;
  std::vector<TensorView> my_rows, whole_rows;
  for (int i = 0; i < rows; ++i) {
    const uint64_t draw = static_cast<uint64_t>(i / 6);
    switch (i % 6) {
      case 0:
        reqs.push_back(request(0.0, 0, 1.0, 1, draw, 0));
        break;  // greedy
      case 1:
        reqs.push_back(request(0.0, 0, 1.0, 1, draw, 4));
        break;  // greedy + logprobs
      case 2:
        reqs.push_back(request(0.8, 40, 1.0, 2, draw, 3));
        break;  // top-k
      case 3:
        reqs.push_back(request(1.0, 0, 0.85, 3, draw, 2));
        break;  // top-p
      case 4:
        reqs.push_back(request(1.2, 0, 1.0, 4, draw, 5));
        break;  // full vocabulary
      default:
        reqs.push_back(request(0.7, 700, 0.9, 5, draw, 1));
        break;  // top-k > a slice
    }
    float* row = logits.data() + static_cast<size_t>(i) * static_cast<size_t>(padded);
    whole_rows.push_back(TensorView(row, DType::F32, {real}));
    my_rows.push_back(TensorView(row + mine.vocab_rows.begin, DType::F32, {mine.vocab_rows.size()}));
  }
  const std::vector<SelectedToken> want = select_tokens(whole_rows, whole(real), reqs, nullptr);
  const std::vector<SelectedToken> got = select_tokens(my_rows, mine, reqs, tp.get());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " row " + std::to_string(i));
    EXPECT_EQ(got[i].id, want[i].id);
    EXPECT_LT(got[i].id, real);
    if (reqs[i].logprobs > 0) {
      EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-6);
      EXPECT_LT(want[i].logprob, 0.0f);
    }
    ASSERT_EQ(got[i].top.size(), want[i].top.size());
    EXPECT_EQ(got[i].top.size(), static_cast<size_t>(reqs[i].logprobs));
    for (size_t j = 0; j < got[i].top.size(); ++j) {
      EXPECT_EQ(got[i].top[j].id, want[i].top[j].id);
      EXPECT_NEAR(got[i].top[j].logit, want[i].top[j].logit, 1e-6);
    }
  }
  // Both ranks return the same tokens.
  std::vector<int32_t> ids(got.size()), all(2 * got.size());
  for (size_t i = 0; i < got.size(); ++i) ids[i] = got[i].id;
  tp->all_gather(ids, all);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(all[i], all[got.size() + i]);
}

std::vector<float> random_logits(int64_t n, uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

TEST(TokenSelectionMpi, HalvesOfTheVocabularyMatchOneProcess) {
  OLMO2_REQUIRE_WORLD(2);
  const int rows = 60;
  check_layout(1000, 1000, random_logits(rows * 1000, 21), rows);
}

TEST(TokenSelectionMpi, PaddedLastRankMatchesOneProcess) {
  OLMO2_REQUIRE_WORLD(2);
  const int rows = 60;
  check_layout(997, 1000, random_logits(rows * 1000, 22), rows);
}

TEST(TokenSelectionMpi, TiesAcrossTheRankBoundaryPickTheLowerId) {
  OLMO2_REQUIRE_WORLD(2);
  const int rows = 12;
  std::vector<float> x = random_logits(rows * 1000, 23);
  for (int i = 0; i < rows; ++i) {
    float* row = x.data() + i * 1000;
    // The two best ids straddle the boundary (499 on rank 0, 500 on rank 1); odd rows
    // put the tie further apart (10 and 900).
    const int a = i % 2 ? 10 : 499, b = i % 2 ? 900 : 500;
    row[a] = row[b] = 50.0f;
  }
  check_layout(1000, 1000, x, rows);
  auto tp = tp_group();
  const ShardSpec mine = half(tp->rank(), 1000, 1000);
  const SelectionRequest greedy = request(0.0, 0, 1.0, 0, 0, 2);
  for (int i = 0; i < 2; ++i) {
    float* row = x.data() + i * 1000;
    const SelectedToken t =
        select_tokens({TensorView(row + mine.vocab_rows.begin, DType::F32, {mine.vocab_rows.size()})}, mine, {greedy},
                      tp.get())[0];
    EXPECT_EQ(t.id, i % 2 ? 10 : 499);
    ASSERT_EQ(t.top.size(), 2u);
    EXPECT_EQ(t.top[0].id, i % 2 ? 10 : 499);
    EXPECT_EQ(t.top[1].id, i % 2 ? 900 : 500);
    EXPECT_EQ(t.top[0].logit, t.top[1].logit);
  }
}

TEST(TokenSelectionMpi, AdjustmentsMinPAndTargetsOverHalvesMatchPyTorch) {
  OLMO2_REQUIRE_WORLD(2);
  const test::SelectionFixture f = test::load_selection_fixture();
  auto tp = tp_group();
  const ShardSpec mine = half(tp->rank(), f.vocab, f.vocab);
  std::vector<TensorView> rows;
  std::vector<SelectionRequest> reqs;
  for (const test::SelectionCase& c : f.cases) {
    rows.push_back(TensorView(const_cast<float*>(c.logits.data()) + mine.vocab_rows.begin, DType::F32,
                              {mine.vocab_rows.size()}));
    reqs.push_back(c.request);
  }
  const std::vector<SelectedToken> got = select_tokens(rows, mine, reqs, tp.get());
  for (size_t i = 0; i < f.cases.size(); ++i) {
    const test::SelectionCase& c = f.cases[i];
    SCOPED_TRACE(c.name + " rank " + std::to_string(tp->rank()));
    EXPECT_EQ(got[i].id, c.expected_id);
    if (c.request.logprobs > 0 || c.request.target >= 0) EXPECT_NEAR(got[i].logprob, c.expected_logprob, 2e-6);
    ASSERT_EQ(got[i].top.size(), c.expected_top.size());
    for (size_t j = 0; j < c.expected_top.size(); ++j) {
      EXPECT_EQ(got[i].top[j].id, c.expected_top[j].first);
      EXPECT_NEAR(got[i].top[j].logit, c.expected_top[j].second, 2e-6);
    }
  }
}

TEST(TokenSelectionMpi, AdjustedAndTargetRowsOnAPaddedLastRankMatchOneProcess) {
  OLMO2_REQUIRE_WORLD(2);
  const int64_t real = 997, padded = 1000;
  auto tp = tp_group();
  const ShardSpec mine = half(tp->rank(), real, padded);
  std::vector<float> logits = random_logits(12 * padded, 31);
  std::vector<SelectionRequest> reqs;
  std::vector<TensorView> my_rows, whole_rows;
  for (int i = 0; i < 12; ++i) {
    float* row = logits.data() + static_cast<size_t>(i) * padded;
    for (int64_t j = real; j < padded; ++j) row[j] = 1e9f;  // padding: never chosen
    SelectionRequest r = request(i % 3 == 0 ? 0.0 : 0.9, i % 3 == 1 ? 30 : 0, i % 2 ? 0.9 : 1.0, 40 + i, 2, i % 4);
    r.params.min_p = i % 3 == 2 ? 0.05 : 0.0;
    // The best raw id banned or biased away, ids on both ranks biased up and penalised.
    const int32_t best = static_cast<int32_t>(std::max_element(row, row + real) - row);
    r.adjust.logit_bias = {{3, 1.5f}, {best, -100.0f}, {996, 4.0f}};
    auto& bias = r.adjust.logit_bias;
    std::sort(bias.begin(), bias.end());
    bias.erase(std::unique(bias.begin(), bias.end(), [](auto& a, auto& b) { return a.first == b.first; }), bias.end());
    r.adjust.presence_penalty = 0.5, r.adjust.frequency_penalty = 0.25, r.adjust.repetition_penalty = 1.2;
    r.prompt_ids = {1, 500, 800};
    r.output_counts = {{2, 3}, {499, 1}, {996, 2}};
    r.banned = {0, 995};
    if (i >= 9) r.target = i == 9 ? 12 : i == 10 ? 700 : 996;  // on rank 0, rank 1, the last real id
    reqs.push_back(r);
    whole_rows.push_back(TensorView(row, DType::F32, {real}));
    my_rows.push_back(TensorView(row + mine.vocab_rows.begin, DType::F32, {mine.vocab_rows.size()}));
  }
  const std::vector<SelectedToken> want = select_tokens(whole_rows, whole(real), reqs, nullptr);
  const std::vector<SelectedToken> got = select_tokens(my_rows, mine, reqs, tp.get());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("rank " + std::to_string(tp->rank()) + " row " + std::to_string(i));
    EXPECT_EQ(got[i].id, want[i].id);
    EXPECT_LT(got[i].id, real);
    EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-6);
    if (reqs[i].logprobs > 0 || reqs[i].target >= 0) EXPECT_LT(want[i].logprob, 0.0f);
    ASSERT_EQ(got[i].top.size(), want[i].top.size());
    for (size_t j = 0; j < got[i].top.size(); ++j) {
      EXPECT_EQ(got[i].top[j].id, want[i].top[j].id);
      EXPECT_NEAR(got[i].top[j].logit, want[i].top[j].logit, 1e-6);
    }
  }
}

TEST(TokenSelectionMpi, AllowedMasksOverHalvesMatchOneProcess) {
  // Structured outputs (docs/architecture.md §8): each rank masks its own half; the
  // allowed ids lie on one rank only, on both, or are a single id on either side.
  OLMO2_REQUIRE_WORLD(2);
  const int64_t real = 997, padded = 1000;
  auto tp = tp_group();
  const ShardSpec mine = half(tp->rank(), real, padded);
  std::vector<float> logits = random_logits(16 * padded, 41);
  std::vector<SelectionRequest> reqs;
  std::vector<TensorView> my_rows, whole_rows;
  const std::vector<std::vector<int32_t>> sets = {{3, 17, 250}, {600, 996}, {0, 499, 500, 996}, {512}, {7}};
  for (int i = 0; i < 16; ++i) {
    float* row = logits.data() + static_cast<size_t>(i) * padded;
    for (int64_t j = real; j < padded; ++j) row[j] = 1e9f;  // padding: never chosen
    SelectionRequest r = request(i % 4 == 0 ? 0.0 : 0.9, i % 4 == 1 ? 2 : 0, i % 4 == 2 ? 0.8 : 1.0, 70 + i,
                                 static_cast<uint64_t>(i), i % 3);
    auto mask = std::make_shared<std::vector<uint64_t>>((real + 63) / 64, 0);
    for (int32_t id : sets[static_cast<size_t>(i) % sets.size()]) (*mask)[id / 64] |= uint64_t{1} << (id % 64);
    r.allowed = mask;
    if (i % 5 == 4) r.adjust.logit_bias = {{7, -3.0f}, {512, 2.0f}};  // a bias on top of the mask
    reqs.push_back(r);
    whole_rows.push_back(TensorView(row, DType::F32, {real}));
    my_rows.push_back(TensorView(row + mine.vocab_rows.begin, DType::F32, {mine.vocab_rows.size()}));
  }
  const std::vector<SelectedToken> want = select_tokens(whole_rows, whole(real), reqs, nullptr);
  const std::vector<SelectedToken> got = select_tokens(my_rows, mine, reqs, tp.get());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("rank " + std::to_string(tp->rank()) + " row " + std::to_string(i));
    const std::vector<int32_t>& allowed = sets[i % sets.size()];
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), got[i].id), allowed.end()) << got[i].id;
    EXPECT_EQ(got[i].id, want[i].id);
    EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-6);
    ASSERT_EQ(got[i].top.size(), want[i].top.size());
    for (size_t j = 0; j < got[i].top.size(); ++j) EXPECT_EQ(got[i].top[j].id, want[i].top[j].id);
  }
}

}  // namespace
}  // namespace olmo2
