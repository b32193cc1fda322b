// TraceSpec (runtime/trace/trace_spec.cpp): positions, response keys, which sites a spec
// touches, its plan encoding, the prefix cache's intervention key, read shapes and the
// worst-case bytes of a request's reads, on the gqa-f32 fixture's config.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <limits>

#include "core/error.h"
#include "runtime/trace/trace_spec.h"
#include "tests/test_util.h"

namespace olmo2::trace {
namespace {

using nlohmann::json;
using Kind = PositionSelector::Kind;

// 8 heads, 2 kv heads, head_dim 8, hidden 64, intermediate 128, vocab 192, 3 layers.
ModelConfig gqa() { return ModelConfig::load(test::source_path("tests/golden/fixtures/gqa-f32")); }

PositionSelector selector(Kind kind, std::vector<int64_t> list = {}, int64_t from = 0) {
  PositionSelector p;
  p.kind = kind, p.list = std::move(list), p.from = from;
  return p;
}

ActivationRead read(const std::string& name, TapSite site, std::vector<int64_t> layers, Reduce reduce = Reduce::None,
                    Kind positions = Kind::All) {
  ActivationRead r;
  r.name = name, r.site = site, r.layers = std::move(layers), r.reduce = reduce, r.positions.kind = positions;
  return r;
}

Intervention add(TapSite site, std::vector<int64_t> layers, std::vector<float> vector, float coefficient) {
  Intervention iv;
  iv.site = site, iv.layers = std::move(layers), iv.vector = std::move(vector), iv.coefficient = coefficient;
  return iv;
}

Intervention ablate(int64_t layer, int64_t head, PositionSelector positions = {}) {
  Intervention iv;
  iv.kind = Intervention::Kind::AblateHead, iv.site = TapSite::AttentionHeadOutputs;
  iv.layers = {layer}, iv.head = head, iv.positions = std::move(positions);
  return iv;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

void expect_same_positions(const PositionSelector& a, const PositionSelector& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.list, b.list);
  EXPECT_EQ(a.from, b.from);
}

void expect_same(const TraceSpec& a, const TraceSpec& b) {
  EXPECT_EQ(a.prompt_len, b.prompt_len);
  ASSERT_EQ(a.reads.size(), b.reads.size());
  for (size_t i = 0; i < a.reads.size(); ++i) {
    EXPECT_EQ(a.reads[i].name, b.reads[i].name);
    EXPECT_EQ(a.reads[i].site, b.reads[i].site);
    EXPECT_EQ(a.reads[i].layers, b.reads[i].layers);
    EXPECT_EQ(a.reads[i].reduce, b.reads[i].reduce);
    expect_same_positions(a.reads[i].positions, b.reads[i].positions);
  }
  ASSERT_EQ(a.interventions.size(), b.interventions.size());
  for (size_t i = 0; i < a.interventions.size(); ++i) {
    const Intervention &x = a.interventions[i], &y = b.interventions[i];
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.site, y.site);
    EXPECT_EQ(x.layers, y.layers);
    EXPECT_EQ(bits(x.vector), bits(y.vector));
    EXPECT_EQ(std::bit_cast<uint32_t>(x.coefficient), std::bit_cast<uint32_t>(y.coefficient));
    EXPECT_EQ(x.head, y.head);
    expect_same_positions(x.positions, y.positions);
  }
}

// A spec with every kind of field set to something other than its default.
TraceSpec full_spec() {
  TraceSpec s;
  s.prompt_len = 17;
  s.reads.push_back(read("attention_premix", TapSite::AttentionHeadOutputs, {0, 2}, Reduce::Norm, Kind::Generated));
  s.reads.push_back(read("logits", TapSite::LmHeadOutput, {}, Reduce::Mean, Kind::Prompt));
  s.reads.push_back(read("attention_probabilities", TapSite::AttentionProbabilities, {1}));
  Intervention steer =
      add(TapSite::MlpOutput, {0, 1, 2}, {-0.0f, 1e-45f, std::numeric_limits<float>::max(), -1.5f, 0.1f}, -0.25f);
  steer.positions = selector(Kind::From, {}, 4);
  s.interventions.push_back(steer);
  s.interventions.push_back(ablate(2, 7, selector(Kind::List, {0, 3, 9})));
  return s;
}

TEST(TraceSpec, PositionSelectorsCoverTheirPositions) {
  // prompt of 3 tokens: positions 0 1 2 are the prompt, 3 … the generated ones.
  const std::vector<std::pair<PositionSelector, std::vector<bool>>> cases = {
      {selector(Kind::All), {true, true, true, true, true}},
      {selector(Kind::Prompt), {true, true, true, false, false}},
      {selector(Kind::Generated), {false, false, false, true, true}},
      {selector(Kind::List, {1, 4}), {false, true, false, false, true}},
      {selector(Kind::From, {}, 2), {false, false, true, true, true}},
  };
  for (const auto& [sel, covered] : cases) {
    for (int64_t p = 0; p < 5; ++p) EXPECT_EQ(sel.contains(p, 3), covered[p]) << int(sel.kind) << " at " << p;
    EXPECT_FALSE(sel.contains(-1, 3));
  }
}

TEST(TraceSpec, KeysNameTheLayerAndTheReduction) {
  EXPECT_EQ(read("layer_output", TapSite::LayerOutput, {3}).key(3), "layers.3.layer_output");
  EXPECT_EQ(read("logits", TapSite::LmHeadOutput, {}, Reduce::Norm).key(-1), "logits:norm");
  EXPECT_EQ(read("attention_premix", TapSite::AttentionHeadOutputs, {0}, Reduce::Mean).key(0),
            "layers.0.attention_premix:mean");
}

TEST(TraceSpec, TouchesTheSitesOfItsReadsAndInterventions) {
  TraceSpec s;
  s.reads.push_back(read("layer_output", TapSite::LayerOutput, {1, 2}));
  s.reads.push_back(read("final_norm_output", TapSite::FinalNormOutput, {}));
  s.interventions.push_back(ablate(0, 3));
  EXPECT_TRUE(s.touches(TapSite::LayerOutput, 1));
  EXPECT_TRUE(s.touches(TapSite::LayerOutput, 2));
  EXPECT_FALSE(s.touches(TapSite::LayerOutput, 0));
  EXPECT_FALSE(s.touches(TapSite::LayerOutput, -1));
  EXPECT_TRUE(s.touches(TapSite::FinalNormOutput, -1));
  EXPECT_FALSE(s.touches(TapSite::TokenEmbeddings, -1));
  EXPECT_TRUE(s.touches(TapSite::AttentionHeadOutputs, 0));
  EXPECT_FALSE(s.touches(TapSite::AttentionHeadOutputs, 1));
  EXPECT_FALSE(s.touches(TapSite::LayerInput, 1));
}

TEST(TraceSpec, ReadsPromptWhenAReadCoversAPromptPosition) {
  TraceSpec s;
  s.interventions.push_back(ablate(0, 3));
  EXPECT_FALSE(s.reads_prompt());
  s.reads.push_back(read("logits", TapSite::LmHeadOutput, {}, Reduce::None, Kind::Generated));
  EXPECT_FALSE(s.reads_prompt());
  s.reads.push_back(read("layer_mid", TapSite::LayerMid, {0}, Reduce::None, Kind::Prompt));
  EXPECT_TRUE(s.reads_prompt());
  s.reads.back().positions.kind = Kind::All;
  EXPECT_TRUE(s.reads_prompt());
}

TEST(TraceSpec, EncodeDecodeRoundTripsEveryFieldBitExactly) {
  const TraceSpec spec = full_spec();
  std::vector<int64_t> words = {42};  // decoding starts where it is told
  spec.encode(words);
  TraceSpec().encode(words);  // an empty spec right after it
  size_t pos = 1;
  expect_same(TraceSpec::decode(words, pos), spec);
  const TraceSpec empty = TraceSpec::decode(words, pos);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.prompt_len, 0);
  EXPECT_EQ(pos, words.size());
}

TEST(TraceSpec, DecodeThrowsOnEveryTruncationAndOnBadWords) {
  std::vector<int64_t> words;
  full_spec().encode(words);
  for (size_t n = 0; n < words.size(); ++n) {
    size_t pos = 0;
    EXPECT_THROW(TraceSpec::decode(std::span(words).first(n), pos), Error) << "truncated to " << n << " words";
  }
  const auto throws_with = [&](size_t at, int64_t value) {
    std::vector<int64_t> bad = words;
    bad[at] = value;
    size_t pos = 0;
    EXPECT_THROW(TraceSpec::decode(bad, pos), Error) << "word " << at << " = " << value;
  };
  throws_with(0, 7);                 // not the start of a spec
  throws_with(2, -1);                // a negative read count
  throws_with(2, int64_t{1} << 40);  // more reads than words
  throws_with(3, 1000);              // a name longer than the words left
  throws_with(6, 99);                // a site past TapSite::Count
}

TEST(TraceSpec, InterventionKeyIsEqualExactlyForEqualInterventions) {
  const TraceSpec a = full_spec();
  EXPECT_FALSE(a.intervention_key().empty());
  TraceSpec reads_only = a;
  reads_only.interventions.clear();
  EXPECT_EQ(reads_only.intervention_key(), "");
  EXPECT_EQ(TraceSpec().intervention_key(), "");

  TraceSpec same = a;  // other reads and prompt: the same interventions
  same.reads.clear();
  same.prompt_len = 3;
  EXPECT_EQ(same.intervention_key(), a.intervention_key());

  const std::vector<std::pair<const char*, void (*)(TraceSpec&)>> changes = {
      {"one bit of the vector",
       [](TraceSpec& s) {
         s.interventions[0].vector[3] =
             std::bit_cast<float>(std::bit_cast<uint32_t>(s.interventions[0].vector[3]) ^ 1u);
       }},
      {"-0 to +0", [](TraceSpec& s) { s.interventions[0].vector[0] = 0.0f; }},
      {"the coefficient", [](TraceSpec& s) { s.interventions[0].coefficient = -0.5f; }},
      {"the site", [](TraceSpec& s) { s.interventions[0].site = TapSite::LayerOutput; }},
      {"a layer",
       [](TraceSpec& s) {
         s.interventions[0].layers = {0, 1};
       }},
      {"from", [](TraceSpec& s) { s.interventions[0].positions.from = 5; }},
      {"the head", [](TraceSpec& s) { s.interventions[1].head = 6; }},
      {"a position",
       [](TraceSpec& s) {
         s.interventions[1].positions.list = {0, 3, 8};
       }},
      {"the position kind", [](TraceSpec& s) { s.interventions[1].positions = selector(Kind::Generated); }},
      {"the order", [](TraceSpec& s) { std::swap(s.interventions[0], s.interventions[1]); }},
      {"one more", [](TraceSpec& s) { s.interventions.push_back(ablate(0, 0)); }},
  };
  for (const auto& [what, change] : changes) {
    TraceSpec b = a;
    change(b);
    EXPECT_NE(b.intervention_key(), a.intervention_key()) << what;
  }
}

TEST(TraceSpec, InterventionKeyHoldsThePromptLengthOnlyForRelativePositions) {
  // "prompt" and "generated" steer other absolute positions for another prompt length: a
  // later request whose prompt holds an earlier answer must not reuse its blocks.
  for (const Kind kind : {Kind::Prompt, Kind::Generated}) {
    TraceSpec a = full_spec();
    a.interventions[1].positions = selector(kind);
    a.prompt_len = 11;
    TraceSpec b = a;
    b.prompt_len = 17;
    EXPECT_NE(a.intervention_key(), b.intervention_key());
    b.prompt_len = 11;
    EXPECT_EQ(a.intervention_key(), b.intervention_key());
  }
  TraceSpec all = full_spec();  // absolute and "all" positions: the length does not matter
  all.interventions[1].positions = selector(Kind::All);
  TraceSpec longer = all;
  longer.prompt_len = all.prompt_len + 6;
  EXPECT_EQ(all.intervention_key(), longer.intervention_key());
}

TEST(TraceSpec, ReadShapesOfEveryNameAndReduction) {
  const ModelConfig c = gqa();
  using S = std::vector<int64_t>;
  struct Case {
    TapSite site;
    S none, norm, mean;
  };
  // P = 5 positions, K = 7 keys.
  const Case cases[] = {
      {TapSite::TokenEmbeddings, {5, 64}, {5}, {64}},
      {TapSite::LayerInput, {5, 64}, {5}, {64}},
      {TapSite::AttentionQueries, {8, 5, 8}, {8, 5}, {8, 8}},
      {TapSite::AttentionKeys, {2, 5, 8}, {2, 5}, {2, 8}},
      {TapSite::AttentionValues, {2, 5, 8}, {2, 5}, {2, 8}},
      {TapSite::AttentionProbabilities, {8, 5, 7}, {8, 5}, {8, 7}},
      {TapSite::AttentionHeadOutputs, {5, 8, 8}, {5, 8}, {8, 8}},
      {TapSite::AttentionOutput, {5, 64}, {5}, {64}},
      {TapSite::LayerMid, {5, 64}, {5}, {64}},
      {TapSite::MlpNeurons, {5, 128}, {5}, {128}},
      {TapSite::MlpOutput, {5, 64}, {5}, {64}},
      {TapSite::LayerOutput, {5, 64}, {5}, {64}},
      {TapSite::FinalNormOutput, {5, 64}, {5}, {64}},
      {TapSite::LmHeadOutput, {5, 192}, {5}, {192}},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(read_shape(read("x", k.site, {0}, Reduce::None), c, 5, 7), k.none) << int(k.site);
    EXPECT_EQ(read_shape(read("x", k.site, {0}, Reduce::Norm), c, 5, 7), k.norm) << int(k.site);
    EXPECT_EQ(read_shape(read("x", k.site, {0}, Reduce::Mean), c, 5, 7), k.mean) << int(k.site);
  }
}

TEST(TraceSpec, ActivationBytesIsTheWorstCaseOverPositions) {
  const ModelConfig c = gqa();
  // Prompt 5 tokens, max_tokens 4: 3 generated tokens are fed back (positions 5 6 7).
  TraceSpec s;
  // every layer's residual, all 8 positions: 3 layers · 8 · 64 floats · 4 B = 6144
  s.reads.push_back(read("layer_output", TapSite::LayerOutput, {0, 1, 2}));
  // layer 1's pattern over the prompt: P = K = 5, [8, 5, 5] = 200 floats · 4 B = 800
  s.reads.push_back(read("attention_probabilities", TapSite::AttentionProbabilities, {1}, Reduce::None, Kind::Prompt));
  // the logits' norm at the 3 generated positions: [3] · 4 B = 12
  s.reads.push_back(read("logits", TapSite::LmHeadOutput, {}, Reduce::Norm, Kind::Generated));
  // layers 0 and 1's mean pattern over all: K = 8, [8, 8] = 64 floats · 2 layers · 4 B = 512
  s.reads.push_back(read("attention_probabilities", TapSite::AttentionProbabilities, {0, 1}, Reduce::Mean));
  EXPECT_EQ(activation_bytes(s, c, 5, 4), 6144 + 800 + 12 + 512);

  TraceSpec generated;  // nothing generated is fed with max_tokens 1 (or 0, echo)
  generated.reads.push_back(read("logits", TapSite::LmHeadOutput, {}, Reduce::None, Kind::Generated));
  EXPECT_EQ(activation_bytes(generated, c, 5, 1), 0);
  EXPECT_EQ(activation_bytes(generated, c, 5, 0), 0);
  EXPECT_EQ(activation_bytes(generated, c, 5, 2), 192 * 4);
  EXPECT_EQ(activation_bytes(TraceSpec(), c, 5, 4), 0);
  // Saturates rather than overflowing.
  EXPECT_EQ(activation_bytes(s, c, int64_t{1} << 40, int64_t{1} << 40), std::numeric_limits<int64_t>::max());
  EXPECT_THROW(activation_bytes(s, c, -1, 4), InputError);
}

}  // namespace
}  // namespace olmo2::trace
