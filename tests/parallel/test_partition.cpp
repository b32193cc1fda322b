// The partition plan (docs/architecture.md §4, §5): released shapes, kv replication, uneven
// pipeline stages (§11.3), vocab padding, parameter accounting, and every refusal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>

#include "parallel/partition.h"
#include "tests/test_util.h"

namespace olmo2::parallel {
namespace {

using test::input_error;
using ::testing::HasSubstr;

/// The shape of a released model, read from its config.json fixture (no runtime/ code).
ModelShape released(const std::string& name) {
  std::ifstream in(test::source_path("tests/golden/fixtures/configs/" + name + "/config.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  const int64_t heads = j["num_attention_heads"];
  return {.layers = j["num_hidden_layers"],
          .hidden = j["hidden_size"],
          .heads = heads,
          .kv_heads = j["num_key_value_heads"],
          .head_dim = j["hidden_size"].get<int64_t>() / heads,
          .intermediate = j["intermediate_size"],
          .vocab = j["vocab_size"],
          .tied_embeddings = j["tie_word_embeddings"]};
}

ModelShape small(int64_t layers, int64_t heads, int64_t kv, int64_t vocab, int64_t inter = 48) {
  return {.layers = layers,
          .hidden = 4 * heads,
          .heads = heads,
          .kv_heads = kv,
          .head_dim = 4,
          .intermediate = inter,
          .vocab = vocab};
}

/// Parameters of all ranks of DP replica 0: {held, owned}.
std::pair<int64_t, int64_t> replica_sums(const PartitionPlan& plan) {
  int64_t held = 0, owned = 0;
  for (const RankPartition& r : plan.ranks) {
    if (r.coords.dp == 0) held += r.parameters, owned += r.owned_parameters;
  }
  return {held, owned};
}

/// What the ranks of one replica hold beyond the model: post-norms and the final norm on
/// every TP rank, each replicated kv head on tp/kv ranks, a tied lm_head copy when pp > 1.
int64_t expected_held(const ModelShape& s, int tp, int pp) {
  const int64_t h = s.hidden, kv = s.kv_heads * s.head_dim;
  const int64_t replicas = s.kv_heads < tp ? tp / s.kv_heads : 1;
  return s.parameter_count() + (tp - 1) * (2 * h * s.layers + h) +
         (replicas - 1) * s.layers * (2 * kv * h + kv) +
         (s.tied_embeddings && pp > 1 ? s.vocab * h : 0);
}

TEST(Partition, ReleasedParameterCounts) {
  EXPECT_EQ(released("OLMo-2-0425-1B").parameter_count(), 1484916736);
  EXPECT_EQ(released("OLMo-2-1124-7B").parameter_count(), 7298617344);
  EXPECT_EQ(released("OLMo-2-1124-13B").parameter_count(), 13716198400);
  EXPECT_EQ(released("OLMo-2-0325-32B").parameter_count(), 32234279936);
}

TEST(Partition, Olmo32BAtTp8SplitsKvHeadsWithoutReplication) {
  const ModelShape s = released("OLMo-2-0325-32B");
  const PartitionPlan plan = make_partition_plan(s, 8, 1, 1);
  ASSERT_EQ(plan.ranks.size(), 8u);
  EXPECT_EQ(plan.padded_vocab, 100352);
  for (int t = 0; t < 8; ++t) {
    const RankPartition& r = plan.ranks[t];
    EXPECT_EQ(r.rank, t);
    EXPECT_EQ(r.coords, (Coords{t, 0, 0}));
    EXPECT_EQ(r.chunks.front(), (Range{0, 64}));
    EXPECT_EQ(r.q_heads, (Range{5 * t, 5 * t + 5}));
    EXPECT_EQ(r.kv_heads, (Range{t, t + 1}));
    EXPECT_EQ(r.kv_replicas, 1);
    EXPECT_EQ(r.kv_replica, 0);
    EXPECT_EQ(r.q_rows, (Range{640 * t, 640 * t + 640}));
    EXPECT_EQ(r.kv_rows, (Range{128 * t, 128 * t + 128}));
    EXPECT_EQ(r.mlp_rows, (Range{3456 * t, 3456 * t + 3456}));
    EXPECT_EQ(r.vocab_rows, (Range{12544 * t, 12544 * t + 12544}));
    EXPECT_EQ(r.vocab_real, r.vocab_rows);
    EXPECT_TRUE(r.embedding && r.final_norm);
    EXPECT_EQ(r.padding_elements, 0);
  }
  const auto [held, owned] = replica_sums(plan);
  EXPECT_EQ(owned, 32234279936);
  EXPECT_EQ(held, 32234279936 + 7 * (2 * 5120 * 64 + 5120));
  EXPECT_EQ(held, expected_held(s, 8, 1));
}

TEST(Partition, Olmo32BRefusesTp16AndTp5AndTp40) {
  const ModelShape s = released("OLMo-2-0325-32B");
  EXPECT_THAT(input_error([&] { make_partition_plan(s, 16, 1, 1); }),
              HasSubstr("num_attention_heads 40 is not divisible by tp 16"));
  EXPECT_THAT(input_error([&] { make_partition_plan(s, 5, 1, 1); }),
              HasSubstr("num_key_value_heads 8 neither divisible by nor dividing tp 5"));
  EXPECT_THAT(input_error([&] { make_partition_plan(s, 40, 1, 1); }),
              HasSubstr("intermediate_size 27648 is not divisible by tp 40"));
  EXPECT_THAT(input_error([&] { make_partition_plan(s, 3, 1, 1); }),
              HasSubstr("num_attention_heads 40 is not divisible by tp 3"));
}

TEST(Partition, Olmo1BAtTp4Pp4) {
  const ModelShape s = released("OLMo-2-0425-1B");
  const PartitionPlan plan = make_partition_plan(s, 4, 4, 1);
  ASSERT_EQ(plan.ranks.size(), 16u);
  EXPECT_EQ(plan.stage_layers, (std::vector<int64_t>{4, 4, 4, 4}));
  const RankPartition& r5 = plan.ranks[5];  // tp 1, stage 1
  EXPECT_EQ(r5.coords, (Coords{1, 0, 1}));
  EXPECT_EQ(&plan.at({1, 0, 1}), &r5);
  EXPECT_EQ(r5.chunks.front(), (Range{4, 8}));
  EXPECT_EQ(r5.q_heads, (Range{4, 8}));
  EXPECT_EQ(r5.kv_heads, (Range{4, 8}));
  EXPECT_FALSE(r5.embedding || r5.final_norm);
  const int64_t per_layer = (2 * 512 * 2048 + 512) * 2 + 3 * 2048 * 2048 + 2 * 2048;
  EXPECT_EQ(r5.parameters, 4 * per_layer);
  EXPECT_EQ(r5.bytes(2), 8 * per_layer);
  EXPECT_EQ(plan.ranks[0].parameters, 4 * per_layer + 25088 * 2048);
  EXPECT_EQ(plan.ranks[15].parameters, 4 * per_layer + 25088 * 2048 + 2048);
  EXPECT_EQ(plan.ranks[15].owned_parameters,
            4 * per_layer - 4 * 2 * 2048 + 25088 * 2048);  // norms owned by tp 0
  EXPECT_EQ(plan.ranks[12].owned_parameters, 4 * per_layer + 25088 * 2048 + 2048);
  for (int t = 0; t < 4; ++t)
    EXPECT_TRUE(plan.at({t, 0, 0}).embedding && plan.at({t, 0, 3}).final_norm);
  const auto [held, owned] = replica_sums(plan);
  EXPECT_EQ(owned, 1484916736);
  EXPECT_EQ(held, expected_held(s, 4, 4));
}

TEST(Partition, KvHeadsFewerThanTpAreReplicatedOnConsecutiveRanks) {
  const ModelShape s = small(2, 8, 2, 64);
  const PartitionPlan plan = make_partition_plan(s, 4, 1, 1);
  for (int t = 0; t < 4; ++t) {
    const RankPartition& r = plan.ranks[t];
    EXPECT_EQ(r.kv_heads, (Range{t / 2, t / 2 + 1})) << t;
    EXPECT_EQ(r.kv_rows, (Range{4 * (t / 2), 4 * (t / 2) + 4})) << t;
    EXPECT_EQ(r.kv_replicas, 2);
    EXPECT_EQ(r.kv_replica, t % 2);
    EXPECT_EQ(r.q_heads, (Range{2 * t, 2 * t + 2}));
  }
  const int64_t kv_part = 2 * (2 * 4 * 32 + 4);  // 2 layers × (k, v rows + k_norm) of one head
  EXPECT_EQ(plan.ranks[0].parameters - plan.ranks[0].owned_parameters, 0);
  EXPECT_EQ(plan.ranks[1].parameters - plan.ranks[1].owned_parameters, kv_part + 2 * 2 * 32 + 32);
  const auto [held, owned] = replica_sums(plan);
  EXPECT_EQ(owned, s.parameter_count());
  EXPECT_EQ(held, expected_held(s, 4, 1));

  const PartitionPlan mqa = make_partition_plan(small(1, 8, 1, 64), 8, 1, 1);
  for (const RankPartition& r : mqa.ranks) {
    EXPECT_EQ(r.kv_heads, (Range{0, 1}));
    EXPECT_EQ(r.kv_replicas, 8);
    EXPECT_EQ(r.kv_replica, r.coords.tp);
  }
}

TEST(Partition, EveryQueryHeadSitsWithItsKvHead) {
  for (int64_t heads : {1, 2, 4, 6, 8, 12, 16, 40}) {
    for (int64_t kv = 1; kv <= heads; ++kv) {
      if (heads % kv) continue;
      for (int tp = 1; tp <= heads; ++tp) {
        if (heads % tp || (kv >= tp ? kv % tp : tp % kv)) continue;
        const PartitionPlan plan = make_partition_plan(small(1, heads, kv, 7, 48 * 40), tp, 1, 1);
        std::vector<int> q_seen(heads, 0), kv_owned(kv, 0), kv_held(kv, 0);
        for (const RankPartition& r : plan.ranks) {
          for (int64_t q = r.q_heads.begin; q < r.q_heads.end; ++q) {
            ++q_seen[q];
            const int64_t j = q / (heads / kv);  // GQA: kv head j serves q heads j·r … j·r+r−1
            EXPECT_TRUE(j >= r.kv_heads.begin && j < r.kv_heads.end)
                << heads << "/" << kv << " tp " << tp;
          }
          for (int64_t j = r.kv_heads.begin; j < r.kv_heads.end; ++j) {
            ++kv_held[j];
            if (r.kv_replica == 0) ++kv_owned[j];
          }
        }
        for (int c : q_seen) EXPECT_EQ(c, 1);
        for (int c : kv_owned) EXPECT_EQ(c, 1);
        for (int c : kv_held) EXPECT_EQ(c, kv < tp ? tp / kv : 1);
      }
    }
  }
}

TEST(Partition, CaseC3UnevenStagesPlaceEveryLayerOnce) {
  EXPECT_EQ(balanced_stage_layers(30, 4), (std::vector<int64_t>{8, 8, 7, 7}));
  EXPECT_EQ(balanced_stage_layers(6, 4), (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_EQ(balanced_stage_layers(5, 2), (std::vector<int64_t>{3, 2}));
  const PartitionPlan plan = make_partition_plan(small(30, 2, 2, 16), 1, 4, 1);
  const std::vector<Range> want = {{0, 8}, {8, 16}, {16, 23}, {23, 30}};
  for (int p = 0; p < 4; ++p) EXPECT_EQ(plan.at({0, 0, p}).chunks.front(), want[p]);

  for (int64_t layers = 1; layers <= 70; ++layers) {
    for (int pp = 1; pp <= std::min<int64_t>(layers, 30); ++pp) {
      const PartitionPlan p = make_partition_plan(small(layers, 2, 1, 16), 2, pp, 2);
      std::vector<int> seen(layers, 0);
      int64_t fewest = layers, most = 0;
      for (int stage = 0; stage < pp; ++stage) {
        const Range l = p.at({0, 0, stage}).chunks.front();
        ASSERT_GE(l.size(), 1);
        fewest = std::min(fewest, l.size()), most = std::max(most, l.size());
        if (stage > 0) {
          EXPECT_EQ(l.begin, p.at({0, 0, stage - 1}).chunks.front().end);
          EXPECT_LE(l.size(), p.at({0, 0, stage - 1}).chunks.front().size());
        }
        for (int64_t i = l.begin; i < l.end; ++i) ++seen[i];
        for (int t = 0; t < 2; ++t) {
          for (int d = 0; d < 2; ++d) EXPECT_EQ(p.at({t, d, stage}).chunks.front(), l);
        }
      }
      EXPECT_LE(most - fewest, 1) << layers << " over " << pp;
      for (int64_t i = 0; i < layers; ++i)
        ASSERT_EQ(seen[i], 1) << "layer " << i << " of " << layers << " pp " << pp;
      EXPECT_EQ(replica_sums(p).second, p.shape.parameter_count());
    }
  }
}

TEST(Partition, ExplicitStageLayers) {
  const ModelShape s = small(30, 2, 2, 16);
  const PartitionPlan plan = make_partition_plan(s, 1, 4, 1, {10, 6, 7, 7});
  EXPECT_EQ(plan.stage_layers, (std::vector<int64_t>{10, 6, 7, 7}));
  EXPECT_EQ(plan.at({0, 0, 1}).chunks.front(), (Range{10, 16}));
  EXPECT_EQ(plan.at({0, 0, 3}).chunks.front(), (Range{23, 30}));
  EXPECT_EQ(replica_sums(plan).second, s.parameter_count());
  EXPECT_EQ(make_partition_plan(s, 1, 2, 1, {1, 29}).at({0, 0, 1}).chunks.front(), (Range{1, 30}));
  EXPECT_THAT(input_error([&] {
                make_partition_plan(s, 1, 4, 1, {8, 8, 7});
              }),
              HasSubstr("--pp-layers 8,8,7 has 3 entries for pp 4"));
  EXPECT_THAT(input_error([&] {
                make_partition_plan(s, 1, 4, 1, {8, 8, 7, 6});
              }),
              HasSubstr("--pp-layers 8,8,7,6 sums to 29, the model has 30 layers"));
  EXPECT_THAT(input_error([&] {
                make_partition_plan(s, 1, 4, 1, {8, 8, 7, 8});
              }),
              HasSubstr("--pp-layers 8,8,7,8 sums to 31, the model has 30 layers"));
  EXPECT_THAT(
      input_error([&] {
        make_partition_plan(s, 1, 4, 1, {15, 0, 8, 7});
      }),
      HasSubstr("--pp-layers 15,0,8,7: stage 1 has 0 layers, every stage needs at least one"));
  EXPECT_THAT(input_error([&] {
                make_partition_plan(s, 1, 2, 1, {30, -1});
              }),
              HasSubstr("--pp-layers 30,-1: stage 1 has -1 layers"));
  EXPECT_THAT(input_error([&] {
                make_partition_plan(s, 1, 2, 1, {INT64_MAX, INT64_MAX});
              }),
              HasSubstr(": stage 0 has 9223372036854775807 layers, the model has 30 layers"));
}

TEST(Partition, VocabPaddedToAMultipleOfTpAndRealRowsCountedOnce) {
  const ModelShape s = small(1, 3, 3, 1000);  // hidden 12
  const PartitionPlan plan = make_partition_plan(s, 3, 1, 1);
  EXPECT_EQ(plan.padded_vocab, 1002);
  const std::vector<Range> rows = {{0, 334}, {334, 668}, {668, 1002}};
  const std::vector<Range> real = {{0, 334}, {334, 668}, {668, 1000}};
  int64_t real_total = 0;
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(plan.ranks[t].vocab_rows, rows[t]);
    EXPECT_EQ(plan.ranks[t].vocab_real, real[t]);
    real_total += plan.ranks[t].vocab_real.size();
  }
  EXPECT_EQ(real_total, 1000);
  EXPECT_EQ(plan.ranks[0].padding_elements, 0);
  EXPECT_EQ(plan.ranks[2].padding_elements, 2 * 2 * 12);  // embedding and lm_head, 2 rows each
  EXPECT_EQ(plan.ranks[2].bytes(4), (plan.ranks[2].parameters + 48) * 4);
  EXPECT_EQ(replica_sums(plan).second, s.parameter_count());
  EXPECT_EQ(replica_sums(plan).first, expected_held(s, 3, 1));

  // Fewer rows than ranks: the last ranks hold padding only. pp 2: embedding and lm_head
  // padding sit on different stages.
  const PartitionPlan tiny = make_partition_plan(small(2, 4, 4, 2), 4, 2, 1);
  EXPECT_EQ(tiny.padded_vocab, 4);
  EXPECT_EQ(tiny.at({2, 0, 0}).vocab_real.size(), 0);
  EXPECT_EQ(tiny.at({2, 0, 0}).padding_elements, 16);
  EXPECT_EQ(tiny.at({2, 0, 1}).padding_elements, 16);
  EXPECT_EQ(tiny.at({1, 0, 1}).vocab_real, (Range{1, 2}));
  EXPECT_EQ(replica_sums(tiny).second, tiny.shape.parameter_count());
}

TEST(Partition, ParameterSumsOverAReplicaForManyLayouts) {
  std::vector<ModelShape> shapes = {released("OLMo-2-0425-1B"), released("OLMo-2-0325-32B"),
                                    small(7, 8, 2, 1001), small(5, 12, 4, 97, 96)};
  ModelShape tied = small(6, 4, 1, 50);
  tied.tied_embeddings = true;
  shapes.push_back(tied);
  for (const ModelShape& s : shapes) {
    for (int tp : {1, 2, 4, 8}) {
      if (s.heads % tp || (s.kv_heads >= tp ? s.kv_heads % tp : tp % s.kv_heads) ||
          s.intermediate % tp)
        continue;
      for (int pp : {1, 2, 3, 5}) {
        if (pp > s.layers) continue;
        const PartitionPlan plan = make_partition_plan(s, tp, pp, 3);
        const auto [held, owned] = replica_sums(plan);
        EXPECT_EQ(owned, s.parameter_count()) << s.layers << " layers, tp " << tp << " pp " << pp;
        EXPECT_EQ(held, expected_held(s, tp, pp))
            << s.layers << " layers, tp " << tp << " pp " << pp;
        for (const RankPartition& r : plan.ranks) {  // every DP replica is the same
          const RankPartition& first = plan.at({r.coords.tp, 0, r.coords.pp});
          EXPECT_EQ(r.parameters, first.parameters);
          EXPECT_EQ(r.owned_parameters, first.owned_parameters);
          EXPECT_EQ(r.chunks.front(), first.chunks.front());
        }
      }
    }
  }
  // Tied, pp 1: lm_head is the embedding, held once. pp 2: the last stage holds a copy.
  EXPECT_EQ(replica_sums(make_partition_plan(tied, 1, 1, 1)).first, tied.parameter_count());
  EXPECT_EQ(replica_sums(make_partition_plan(tied, 1, 2, 1)).first,
            tied.parameter_count() + 50 * 16);
}

TEST(Partition, RefusesImpossibleLayoutsNamingTheNumbers) {
  const ModelShape s = small(2, 8, 8, 64, 27648);
  EXPECT_THAT(input_error([&] { make_partition_plan(s, 0, 1, 1); }),
              HasSubstr("tp must be at least 1, got 0"));
  EXPECT_THAT(input_error([&] { make_partition_plan(s, 1, -2, 1); }),
              HasSubstr("pp must be at least 1, got -2"));
  EXPECT_THAT(input_error([&] { make_partition_plan(s, 1, 1, 0); }),
              HasSubstr("dp must be at least 1, got 0"));
  EXPECT_THAT(input_error([&] { make_partition_plan(s, 1, 2, 1 << 20); }),
              HasSubstr("tp 1 x pp 2 x dp 1048576 = 2097152 ranks exceeds 1048576"));
  EXPECT_THAT(input_error([&] { make_partition_plan(s, 1, 4, 1); }),
              HasSubstr("num_hidden_layers 2 < pp 4"));
  EXPECT_THAT(input_error([&] {
                make_partition_plan(s, 1, 4, 1, {1, 1});
              }),
              HasSubstr("num_hidden_layers 2 < pp 4"));
  EXPECT_THAT(input_error([&] { make_partition_plan(small(2, 10, 10, 64, 27648), 5, 1, 1); }),
              HasSubstr("intermediate_size 27648 is not divisible by tp 5"));
  EXPECT_THAT(input_error([&] { make_partition_plan(small(2, 12, 4, 64), 6, 1, 1); }),
              HasSubstr("num_key_value_heads 4 neither divisible by nor dividing tp 6"));
  EXPECT_THAT(input_error([&] { make_partition_plan(small(2, 12, 6, 64), 4, 1, 1); }),
              HasSubstr("num_key_value_heads 6 neither divisible by nor dividing tp 4"));
  EXPECT_THAT(input_error([&] { make_partition_plan(small(2, 8, 3, 64), 1, 1, 1); }),
              HasSubstr("num_attention_heads 8 is not divisible by num_key_value_heads 3"));
  EXPECT_THAT(input_error([&] { make_partition_plan(small(0, 8, 8, 64), 1, 1, 1); }),
              HasSubstr("num_hidden_layers must be at least 1, got 0"));
  EXPECT_THAT(input_error([&] { make_partition_plan(small(2, 8, 8, 0), 1, 1, 1); }),
              HasSubstr("vocab_size must be at least 1, got 0"));
  EXPECT_THAT(input_error([&] { balanced_stage_layers(3, 0); }),
              HasSubstr("pp must be at least 1, got 0"));
}

TEST(Partition, DescribePrintsOneRowPerRank) {
  const PartitionPlan plan = make_partition_plan(small(5, 8, 2, 1001), 4, 2, 2);
  const std::string d = describe(plan, DType::BF16);
  EXPECT_THAT(d, HasSubstr("partition plan: tp 4 x pp 2 x dp 2 = 16 ranks"));
  EXPECT_THAT(d, HasSubstr("5 layers as 3,2"));
  EXPECT_THAT(d, HasSubstr("2 kv heads, each replicated on 2 consecutive ranks"));
  EXPECT_THAT(d, HasSubstr("vocab: 1001 padded to 1004, 251 rows per rank"));
  EXPECT_THAT(d, HasSubstr("bytes below at bf16"));
  const int64_t lines = std::count(d.begin(), d.end(), '\n');
  EXPECT_EQ(lines, 6 + 1 + 16);  // header lines, column titles, one row per rank
  // Rank 11: tp 3, dp 0, stage 1 (11 = 3 + 4·(0 + 2·1)); holds the last vocab slice with padding.
  const RankPartition& r = plan.ranks[11];
  EXPECT_EQ(r.coords, (Coords{3, 0, 1}));
  EXPECT_THAT(d, HasSubstr("[1,2) replica 1/2"));
  EXPECT_THAT(d, HasSubstr("[753,1001) +3 pad"));
  const size_t row = d.find("\n11 ");
  ASSERT_NE(row, std::string::npos) << d;
  const std::string line = d.substr(row + 1, d.find('\n', row + 1) - row - 1);
  EXPECT_THAT(line, HasSubstr(detail::concat(" ", r.parameters, " ")));
  EXPECT_THAT(line, HasSubstr(detail::concat(" ", r.bytes(2), " ")));
  EXPECT_THAT(line, HasSubstr("norm,lm_head"));
}

}  // namespace
}  // namespace olmo2::parallel
