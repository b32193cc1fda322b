// What one rank's ActivationRecorder sends (docs/architecture.md §13): only what was asked
// for crosses ranks — the columns this rank holds, a replicated column from one rank only,
// a norm or mean already reduced, nothing below record_from, nothing for a sequence that
// traces nothing — on the gqa-f32 fixture's config (8 query heads over 2 kv heads of 8,
// hidden 64, MLP 128) split over tensor-parallel ranks.
#include <gtest/gtest.h>

#include <numeric>

#include "parallel/partition.h"
#include "runtime/trace/activation_recorder.h"
#include "tests/test_util.h"

namespace olmo2::trace {
namespace {

using nlohmann::json;

constexpr int64_t kHeader = static_cast<int64_t>(PieceHeader::kWords);

ModelConfig gqa() { return ModelConfig::load(test::source_path("tests/golden/fixtures/gqa-f32")); }

ShardSpec shard_of(const ModelConfig& c, int tp, int rank) {
  return ShardSpec::from_plan(parallel::make_partition_plan(model_shape(c), tp, 1, 1), rank);
}

std::shared_ptr<const TraceSpec> spec_of(const ModelConfig& c, const json& reads, int64_t prompt_len = 100) {
  return parse_trace_request(&reads, nullptr, c).for_prompt(prompt_len);
}

/// The words `spec` records for one sequence of `rows` new tokens from position `start`
/// when `site` of layer 0 is tapped with a [rows, width] tensor on rank `rank` of `tp`.
int64_t words_sent(const ModelConfig& c, int tp, int rank, const TraceSpec* spec, TapSite site, int64_t width,
                   int64_t rows, int64_t start = 0, int64_t record_from = 0) {
  const ShardSpec shard = shard_of(c, tp, rank);
  ActivationRecorder rec(c, shard, rank, {TracedSequence{spec, 0, record_from}});
  std::vector<float> values(static_cast<size_t>(rows * width));
  std::iota(values.begin(), values.end(), 1.0f);
  const TensorView t = host_view(values).reshape({rows, width});
  if (rec.wants(site, 0)) rec.at(site, 0, TapRows{{0, rows}, {start}}, t);
  return static_cast<int64_t>(rec.pieces().size());
}

TEST(ActivationRecorder, AReplicatedResidualIsSentByTensorParallelRankZeroOnly) {
  const ModelConfig c = gqa();
  const auto spec = spec_of(c, json::array({"layers.0.layer_output"}));
  EXPECT_EQ(words_sent(c, 2, 0, spec.get(), TapSite::LayerOutput, 64, 5), kHeader + 5 * 64);
  EXPECT_EQ(words_sent(c, 2, 1, spec.get(), TapSite::LayerOutput, 64, 5), 0);
}

TEST(ActivationRecorder, SplitColumnsAreSentByTheirRankAndAReplicatedKvHeadOnce) {
  const ModelConfig c = gqa();
  const auto q = spec_of(c, json::array({"layers.0.attention_queries"}));
  for (int rank : {0, 1}) {  // tp 2: 4 query heads of 8 each
    EXPECT_EQ(words_sent(c, 2, rank, q.get(), TapSite::AttentionQueries, 32, 3), kHeader + 3 * 32);
  }
  // tp 4 over 2 kv heads: each kv head on two ranks, sent by its owner (kv_replica 0) only.
  const auto k = spec_of(c, json::array({"layers.0.attention_keys"}));
  int64_t sent = 0;
  for (int rank = 0; rank < 4; ++rank) sent += words_sent(c, 4, rank, k.get(), TapSite::AttentionKeys, 8, 3);
  EXPECT_EQ(sent, 2 * (kHeader + 3 * 8));
}

TEST(ActivationRecorder, NormsAndMeansAreReducedBeforeTheyLeaveTheRank) {
  const ModelConfig c = gqa();
  // mlp_neurons split over tp 2 (64 columns each): one partial sum of squares per row.
  const auto norm = spec_of(c, json::array({json{{"name", "layers.0.mlp_neurons"}, {"reduce", "norm"}}}));
  EXPECT_EQ(words_sent(c, 2, 1, norm.get(), TapSite::MlpNeurons, 64, 7), kHeader + 7);
  // Per head for head-level names: 4 heads per rank.
  const auto heads = spec_of(c, json::array({json{{"name", "layers.0.attention_premix"}, {"reduce", "norm"}}}));
  EXPECT_EQ(words_sent(c, 2, 1, heads.get(), TapSite::AttentionHeadOutputs, 32, 7), kHeader + 7 * 4);
  // A mean: one double (two words) per column, whatever the number of rows.
  const auto mean = spec_of(c, json::array({json{{"name", "layers.0.layer_output"}, {"reduce", "mean"}}}));
  EXPECT_EQ(words_sent(c, 1, 0, mean.get(), TapSite::LayerOutput, 64, 3), kHeader + 2 * 64);
  EXPECT_EQ(words_sent(c, 1, 0, mean.get(), TapSite::LayerOutput, 64, 40), kHeader + 2 * 64);
}

TEST(ActivationRecorder, OnlyCoveredPositionsFromRecordFromAreSent) {
  const ModelConfig c = gqa();
  const auto all = spec_of(c, json::array({"layers.0.layer_output"}));
  // Rows at positions 10 … 15; positions below 13 were recorded before a pre-emption.
  EXPECT_EQ(words_sent(c, 1, 0, all.get(), TapSite::LayerOutput, 64, 6, 10, 13), kHeader + 3 * 64);
  // Generated positions only, with a prompt of 12: positions 12 … 15 of those rows.
  const auto generated =
      spec_of(c, json::array({json{{"name", "layers.0.layer_output"}, {"positions", "generated"}}}), 12);
  EXPECT_EQ(words_sent(c, 1, 0, generated.get(), TapSite::LayerOutput, 64, 6, 10), kHeader + 4 * 64);
  // Another layer or another site: nothing, and the forward is not even asked to call.
  EXPECT_EQ(words_sent(c, 1, 0, all.get(), TapSite::MlpOutput, 64, 6), 0);
}

TEST(ActivationRecorder, ASequenceThatTracesNothingIsNeitherTappedNorGathered) {
  const ModelConfig c = gqa();
  const ShardSpec shard = shard_of(c, 1, 0);
  const auto probs = spec_of(c, json::array({"layers.1.attention_probabilities"}));
  ActivationRecorder rec(c, shard, 0, {TracedSequence{nullptr, 0, 0}, TracedSequence{probs.get(), 1, 0}});
  EXPECT_TRUE(rec.active());
  EXPECT_TRUE(rec.wants(TapSite::AttentionProbabilities, 1));
  EXPECT_FALSE(rec.wants(TapSite::AttentionProbabilities, 0));
  EXPECT_FALSE(rec.wants_attention(1, 0)) << "the untraced sequence's keys are never gathered";
  EXPECT_TRUE(rec.wants_attention(1, 1));
  EXPECT_FALSE(rec.wants_attention(0, 1));
  EXPECT_FALSE(ActivationRecorder(c, shard, 0, {TracedSequence{}, TracedSequence{}}).active());
}

}  // namespace
}  // namespace olmo2::trace
