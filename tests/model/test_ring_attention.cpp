// Ring attention (runtime/model/ring_attention.h) against ops::causal_attention and
// ops::causal_attention_backward on each whole sequence, at cp = the MPI world size (1,
// 2, 3, 4): one sequence, two of different lengths, MHA and GQA, no window, a window smaller
// than a chunk and one spanning chunks; the zigzag shard, its refusals and the pairs the
// ring skips (docs/architecture.md §7 "Context parallelism: ring attention").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ops/attention.h"
#include "ops/backward.h"
#include "parallel/process_groups.h"
#include "runtime/model/ring_attention.h"
#include "runtime/model/ring_attention_parts.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using parallel::test::world_size;

struct Case {
  std::vector<int64_t> lengths;
  int heads, kv_heads;
  int64_t hd, window;
};

/// One sequence's inputs and the single-process reference's outputs.
struct Whole {
  Tensor q, k, v, dout, out, dq, dk, dv;
};

Tensor random_tensor(int64_t rows, int64_t cols, float amplitude, std::mt19937& rng) {
  Tensor t = Tensor::zeros({rows, cols});
  std::uniform_real_distribution<float> u(-amplitude, amplitude);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
  return t;
}

/// Same values on every rank (one seed); q larger than k so that the softmax is peaked.
/// With bf16, q, k, v hold bf16 values, as the model's stored activations do.
std::vector<Whole> references(const Case& c, DType act) {
  std::mt19937 rng(1234);
  std::vector<Whole> seqs;
  for (int64_t len : c.lengths) {
    Whole w;
    w.q = random_tensor(len, c.heads * c.hd, 2.0f, rng);
    w.k = random_tensor(len, c.kv_heads * c.hd, 1.0f, rng);
    w.v = random_tensor(len, c.kv_heads * c.hd, 1.0f, rng);
    w.dout = random_tensor(len, c.heads * c.hd, 1.0f, rng);
    if (act == DType::BF16) {
      for (Tensor* t : {&w.q, &w.k, &w.v}) round_to_dtype(t->f32(), static_cast<size_t>(t->numel()), act);
    }
    w.out = Tensor::zeros(w.q.shape()), w.dq = Tensor::zeros(w.q.shape());
    w.dk = Tensor::zeros(w.k.shape()), w.dv = Tensor::zeros(w.k.shape());
    ops::causal_attention(w.q.view(), w.k.view(), w.v.view(), c.heads, c.kv_heads, w.out.view(), act, c.window);
    ops::causal_attention_backward(w.q.view(), w.k.view(), w.v.view(), w.dout.view(), c.heads, c.kv_heads,
                                   w.dq.view(), w.dk.view(), w.dv.view(), c.window);
    seqs.push_back(std::move(w));
  }
  return seqs;
}

/// This rank's rows of one field of every sequence (the shard's order).
Tensor local_rows(const ContextShard& shard, int rank, const std::vector<Whole>& seqs, Tensor Whole::*field) {
  const int64_t cols = (seqs[0].*field).shape()[1];
  Tensor t = Tensor::zeros({shard.rows(rank), cols});
  for (int64_t r = 0; r < shard.rows(rank); ++r) {
    const Tensor& src = seqs[static_cast<size_t>(shard.seq[rank][r])].*field;
    std::copy_n(src.f32() + shard.pos[rank][r] * cols, cols, t.f32() + r * cols);
  }
  return t;
}

/// max |got − want| / max |want| over this rank's rows of `field`.
double relative_error(const Tensor& got, const ContextShard& shard, int rank, const std::vector<Whole>& seqs,
                      Tensor Whole::*field) {
  const Tensor want = local_rows(shard, rank, seqs, field);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    worst = std::max(worst, test::abs_diff(got.f32()[i], want.f32()[i]));
    scale = std::max(scale, std::fabs(double(want.f32()[i])));
  }
  return worst / scale;
}

/// The ring's outputs on this rank.
struct Local {
  Tensor out, lse, dq, dk, dv;
};

Local run_ring(parallel::Communicator& cp, const ContextShard& shard, const Case& c, const std::vector<Whole>& seqs,
               DType act) {
  const int j = cp.rank();
  const Tensor q = local_rows(shard, j, seqs, &Whole::q), k = local_rows(shard, j, seqs, &Whole::k),
               v = local_rows(shard, j, seqs, &Whole::v), dout = local_rows(shard, j, seqs, &Whole::dout);
  Local l{Tensor::zeros(q.shape()), Tensor::zeros({q.shape()[0], c.heads}), Tensor::zeros(q.shape()),
          Tensor::zeros(k.shape()), Tensor::zeros(k.shape())};
  ring_attention_forward(cp, shard, q.view(), k.view(), v.view(), c.heads, c.kv_heads, c.window, act, l.out.view(),
                         l.lse.view());
  ring_attention_backward(cp, shard, q.view(), k.view(), v.view(), l.out.view(), l.lse.view(), dout.view(), c.heads,
                          c.kv_heads, c.window, l.dq.view(), l.dk.view(), l.dv.view(), act);
  return l;
}

// Lengths are multiples of 24 (= 2·cp at cp 1, 2, 3 and 4 all divide them); chunks of the
// 96-token sequences are 12 rows at cp 4, so window 3 lies within a chunk and 20 spans
// two or three; 480 tokens make runs longer than the 128-row query tile.
const Case kCases[] = {
    {{48}, 4, 2, 16, 0},      // one sequence, GQA
    {{48, 96}, 2, 2, 16, 0},  // two sequences of different lengths, MHA
    {{96}, 4, 2, 8, 3},       // a window smaller than a chunk
    {{96, 48}, 4, 1, 8, 20},  // a window spanning chunks
    {{480}, 2, 1, 8, 200},    // runs of several query tiles
};

// fp32: the ring adds each query's softmax sum, its output and the dk/dv of a key in
// another order than one process (block by block, rescaled by the online softmax), so
// the results agree to a few f32 ulps of the largest value, well within 1e-5.
TEST(RingAttention, EqualsCausalAttentionInF32) {
  auto world = parallel::make_world_communicator(60.0);
  for (const Case& c : kCases) {
    const ContextShard shard = zigzag_shard(c.lengths, world->size());
    const std::vector<Whole> seqs = references(c, DType::F32);
    const Local l = run_ring(*world, shard, c, seqs, DType::F32);
    const int j = world->rank();
    SCOPED_TRACE("lengths[0] " + std::to_string(c.lengths[0]) + " window " + std::to_string(c.window));
    EXPECT_LT(relative_error(l.out, shard, j, seqs, &Whole::out), 1e-5);
    EXPECT_LT(relative_error(l.dq, shard, j, seqs, &Whole::dq), 1e-5);
    EXPECT_LT(relative_error(l.dk, shard, j, seqs, &Whole::dk), 1e-5);
    EXPECT_LT(relative_error(l.dv, shard, j, seqs, &Whole::dv), 1e-5);
  }
}

// bf16 (q, k, v hold bf16 values, as the model's stored activations do). Forward: the
// scores, probabilities and output rounded where the reference rounds them; only the sum
// of a row's exp is added in another order (block by block), so the normaliser may differ
// in its last f32 bits and a rounded probability, then the output, land one bf16 ulp
// apart: at most one output element in 200 may (measured: at most 3 in 1,920), each by at
// most one probability's ulp times |v| plus one output ulp, both ≤ 2^-7·max|v| (a
// probability is ≤ 1, |out| ≤ max|v|). lse is the f32 scores' in both precisions. Backward: the f32 derivative of the attention of the rounded q, k, v, as
// ops::causal_attention_backward computes it, so within the f32 order tolerance 1e-5.
TEST(RingAttention, Bf16MatchesTheReferenceRounding) {
  auto world = parallel::make_world_communicator(60.0);
  const int j = world->rank();
  for (const Case& c : kCases) {
    SCOPED_TRACE("lengths[0] " + std::to_string(c.lengths[0]) + " window " + std::to_string(c.window));
    const ContextShard shard = zigzag_shard(c.lengths, world->size());
    const std::vector<Whole> seqs = references(c, DType::BF16);
    const Local l = run_ring(*world, shard, c, seqs, DType::BF16), l32 = run_ring(*world, shard, c, seqs, DType::F32);
    const Tensor out = local_rows(shard, j, seqs, &Whole::out);
    int64_t differ = 0;
    double max_v = 0;
    for (const Whole& w : seqs) {
      for (int64_t i = 0; i < w.v.numel(); ++i) max_v = std::max(max_v, std::fabs(double(w.v.f32()[i])));
    }
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float got = l.out.f32()[i], want = out.f32()[i];
      if (got == want) continue;
      ++differ;
      ASSERT_LE(test::abs_diff(got, want), 2 * std::ldexp(max_v, -7)) << "out " << i;
    }
    EXPECT_LE(differ * 200, out.numel()) << differ << " of " << out.numel() << " outputs differ";
    for (int64_t i = 0; i < l.lse.numel(); ++i) {
      ASSERT_NEAR(l.lse.f32()[i], l32.lse.f32()[i], 1e-6 * std::max(1.0, std::fabs(double(l32.lse.f32()[i]))));
    }
    EXPECT_LT(relative_error(l.dq, shard, j, seqs, &Whole::dq), 1e-5);
    EXPECT_LT(relative_error(l.dk, shard, j, seqs, &Whole::dk), 1e-5);
    EXPECT_LT(relative_error(l.dv, shard, j, seqs, &Whole::dv), 1e-5);
  }
}

// A block of 2.5 pieces moves one rank on, in place: every value the previous rank's.
TEST(RingAttention, RingShiftMovesBlocksOfSeveralPiecesInPlace) {
  auto world = parallel::make_world_communicator(60.0);
  const int j = world->rank(), p = world->size();
  if (p == 1) GTEST_SKIP() << "a ring of one rank shifts nothing";
  const int64_t n = ring_parts::kRingPiece * 5 / 2;
  std::vector<float> data(static_cast<size_t>(n)), spare;
  for (int64_t i = 0; i < n; ++i) data[size_t(i)] = float(j * 1000 + i % 997);
  ring_parts::ring_shift(*world, data.data(), n, 5, spare);
  const int prev = (j + p - 1) % p;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(data[size_t(i)], float(prev * 1000 + i % 997)) << "element " << i;
  EXPECT_LE(int64_t(spare.size()), ring_parts::kRingPiece);
}

TEST(RingAttention, ZigzagShardHoldsChunksJAndMirror) {
  const ContextShard s = zigzag_shard({8, 16}, 2);
  ASSERT_EQ(s.rows(0), 12);
  ASSERT_EQ(s.rows(1), 12);
  // Sequence 0 (chunks of 2): rank 0 holds positions 0 1 and 6 7; sequence 1 (chunks of
  // 4): 0–3 and 12–15.
  EXPECT_EQ(s.pos[0], (std::vector<int32_t>{0, 1, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(s.seq[0], (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(s.pos[1], (std::vector<int32_t>{2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 10, 11}));
  const ContextShard one = zigzag_shard({6}, 1);
  EXPECT_EQ(one.pos[0], (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(RingAttention, ZigzagShardRefusesLengthsNotDividingTwoCp) {
  const std::string msg = test::input_error([] { zigzag_shard({16, 30}, 4); });
  EXPECT_NE(msg.find("length 30"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cp 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2·cp = 8"), std::string::npos) << msg;
  EXPECT_NE(test::input_error([] { zigzag_shard({16}, 0); }).find("cp 0"), std::string::npos);
}

// Causal, no window: chunk a of 2·cp attends chunks b ≤ a, so 2cp(2cp+1)/2 of the (2cp)²
// chunk pairs are computed, and rank j (chunks j and 2cp−1−j) computes (j+1) + (2cp−j) =
// 2cp+1 of them: the same work on every rank.
TEST(RingAttention, SkipsMaskedPairsAndBalancesRanks) {
  for (int cp : {2, 4}) {
    const ContextShard s = zigzag_shard({16 * cp}, cp);
    int64_t total = 0, pairs = 0;
    for (int j = 0; j < cp; ++j) {
      int64_t mine = 0;
      for (int i = 0; i < cp; ++i) {
        const RingHopWork w = ring_hop_work(s, 0, j, i);
        mine += w.computed, pairs += w.pairs;
      }
      EXPECT_EQ(mine, 2 * cp + 1) << "cp " << cp << " rank " << j;
      total += mine;
    }
    EXPECT_EQ(pairs, 4 * cp * cp);
    EXPECT_EQ(total, 2 * cp * (2 * cp + 1) / 2);
  }
  // Window 3 within chunks of 8 (cp 4, 64 tokens): a chunk attends itself and its
  // predecessor only, 8 + 7 pairs; rank 0 (chunks 0, 7) skips rank 2's (2, 5) whole.
  const ContextShard s = zigzag_shard({64}, 4);
  int64_t total = 0;
  for (int j = 0; j < 4; ++j) {
    for (int i = 0; i < 4; ++i) total += ring_hop_work(s, 3, j, i).computed;
  }
  EXPECT_EQ(total, 15);
  EXPECT_EQ(ring_hop_work(s, 3, 0, 2).computed, 0);
  EXPECT_EQ(ring_hop_work(s, 3, 0, 2).pairs, 4);
}

}  // namespace
}  // namespace olmo2
