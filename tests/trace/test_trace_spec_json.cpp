// parse_trace_request (runtime/trace/trace_spec_json.cpp): every name and layer selector,
// their expansion, interventions, and every documented refusal naming its field and value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "runtime/trace/trace_spec.h"
#include "tests/test_util.h"

namespace olmo2::trace {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Kind = PositionSelector::Kind;

// 8 heads, 2 kv heads, head_dim 8, hidden 64, intermediate 128, vocab 192, 3 layers.
const ModelConfig& gqa() {
  static const ModelConfig c = ModelConfig::load(test::source_path("tests/golden/fixtures/gqa-f32"));
  return c;
}

TraceSpec parse(const json& activations, const json& interventions = nullptr) {
  return parse_trace_request(&activations, &interventions, gqa());
}

std::string error(const json& activations, const json& interventions = nullptr) {
  return test::input_error([&] { parse(activations, interventions); });
}

/// The reads `entries` as a JSON list (a helper, so that a one-entry braced list is never
/// taken for the entry itself).
json list(std::initializer_list<json> entries) {
  json a = json::array();
  for (const json& e : entries) a.push_back(e);
  return a;
}

std::string read_error(std::initializer_list<json> entries) { return error(list(entries)); }

std::string base64_floats(const std::vector<float>& v) {
  std::vector<uint8_t> raw(v.size() * 4);
  std::memcpy(raw.data(), v.data(), raw.size());
  return base64_encode(raw);
}

/// A valid add intervention on `name` with vector entry i = i/8.
json steer(const std::string& name) {
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 8;
  return {{"type", "add"}, {"name", name}, {"vector", base64_floats(v)}};
}

TEST(TraceSpecJson, AbsentOrNullGivesAnEmptySpec) {
  EXPECT_TRUE(parse_trace_request(nullptr, nullptr, gqa()).empty());
  EXPECT_TRUE(parse(nullptr, nullptr).empty());
  EXPECT_TRUE(parse(json::array(), json::array()).empty());
}

TEST(TraceSpecJson, EveryNameMapsToItsSiteAndKeepsItsSpelling) {
  const std::vector<std::pair<std::string, TapSite>> per_layer = {
      {"layer_input", TapSite::LayerInput},
      {"attention_queries", TapSite::AttentionQueries},
      {"attention_keys", TapSite::AttentionKeys},
      {"attention_values", TapSite::AttentionValues},
      {"attention_probabilities", TapSite::AttentionProbabilities},
      {"attention_premix", TapSite::AttentionHeadOutputs},
      {"attention_head_outputs", TapSite::AttentionHeadOutputs},
      {"attention_output", TapSite::AttentionOutput},
      {"layer_mid", TapSite::LayerMid},
      {"mlp_input", TapSite::LayerMid},
      {"mlp_neurons", TapSite::MlpNeurons},
      {"mlp_output", TapSite::MlpOutput},
      {"layer_output", TapSite::LayerOutput},
  };
  for (const auto& [name, site] : per_layer) {
    const TraceSpec s = parse(json::array({"layers.1." + name}));
    ASSERT_EQ(s.reads.size(), 1u) << name;
    EXPECT_EQ(s.reads[0].name, name);
    EXPECT_EQ(s.reads[0].site, site) << name;
    EXPECT_EQ(s.reads[0].layers, std::vector<int64_t>{1}) << name;
    EXPECT_EQ(s.reads[0].reduce, Reduce::None);
    EXPECT_EQ(s.reads[0].positions.kind, Kind::All);
    EXPECT_EQ(s.reads[0].key(1), "layers.1." + name);
  }
  const std::vector<std::pair<std::string, TapSite>> model_wide = {
      {"token_embeddings", TapSite::TokenEmbeddings},
      {"final_norm_output", TapSite::FinalNormOutput},
      {"lm_head_output", TapSite::LmHeadOutput},
      {"logits", TapSite::LmHeadOutput},
  };
  for (const auto& [name, site] : model_wide) {
    const TraceSpec s = parse(json::array({name}));
    ASSERT_EQ(s.reads.size(), 1u) << name;
    EXPECT_EQ(s.reads[0].name, name);
    EXPECT_EQ(s.reads[0].site, site) << name;
    EXPECT_TRUE(s.reads[0].layers.empty()) << name;
    EXPECT_EQ(s.reads[0].key(-1), name);
  }
}

TEST(TraceSpecJson, LayerSelectorsExpandToAscendingLayers) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> cases = {
      {"0", {0}}, {"2", {2}}, {"*", {0, 1, 2}}, {"0:3", {0, 1, 2}}, {"1:3", {1, 2}}, {"0:1", {0}}, {"02", {2}},
  };
  for (const auto& [sel, layers] : cases) {
    EXPECT_EQ(parse(json::array({"layers." + sel + ".layer_output"})).reads.at(0).layers, layers) << sel;
  }
}

TEST(TraceSpecJson, ReadsTakeReduceAndPositions) {
  const TraceSpec s = parse(json::parse(R"([
      {"name": "layers.0:2.attention_probabilities", "reduce": "norm", "positions": "prompt"},
      {"name": "logits", "reduce": "mean", "positions": "generated"},
      {"name": "layers.*.mlp_neurons", "reduce": "none", "positions": "all"},
      {"name": "layers.0.attention_keys", "reduce": null},
      {"name": "layers.*.mlp_input"},
      {"name": "layers.*.layer_mid", "reduce": "mean"}])"));
  ASSERT_EQ(s.reads.size(), 6u);
  EXPECT_EQ(s.reads[0].reduce, Reduce::Norm);
  EXPECT_EQ(s.reads[0].positions.kind, Kind::Prompt);
  EXPECT_EQ(s.reads[0].key(1), "layers.1.attention_probabilities:norm");
  EXPECT_EQ(s.reads[1].reduce, Reduce::Mean);
  EXPECT_EQ(s.reads[1].positions.kind, Kind::Generated);
  EXPECT_EQ(s.reads[2].reduce, Reduce::None);
  EXPECT_EQ(s.reads[2].positions.kind, Kind::All);
  EXPECT_EQ(s.reads[3].reduce, Reduce::None);
  EXPECT_EQ(s.reads[3].key(0), "layers.0.attention_keys");
  EXPECT_EQ(s.reads[5].key(2), "layers.2.layer_mid:mean");
  EXPECT_TRUE(s.interventions.empty());
  EXPECT_TRUE(s.reads_prompt());
}

TEST(TraceSpecJson, InterventionsAreParsedWithTheirPositions) {
  json add = steer("layers.1:3.mlp_output");
  add["coefficient"] = -2.5;
  add["positions"] = {{"from", 4}};
  const TraceSpec s =
      parse(nullptr, json::array({add,
                                  steer("layers.0.attention_output"),
                                  {{"type", "add"},
                                   {"name", "layers.*.layer_output"},
                                   {"vector", base64_floats(std::vector<float>(64, -0.0f))},
                                   {"positions", "generated"}},
                                  {{"type", "ablate_head"}, {"layer", 2}, {"head", 7}, {"positions", {0, 2, 5}}},
                                  {{"type", "ablate_head"}, {"layer", 0.0}, {"head", 0}}}));
  ASSERT_EQ(s.interventions.size(), 5u);
  EXPECT_TRUE(s.reads.empty());
  const Intervention& a = s.interventions[0];
  EXPECT_EQ(a.kind, Intervention::Kind::Add);
  EXPECT_EQ(a.site, TapSite::MlpOutput);
  EXPECT_EQ(a.layers, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(a.vector.size(), 64u);
  EXPECT_EQ(a.vector[0], 0.0f);
  EXPECT_EQ(a.vector[13], 13.0f / 8);
  EXPECT_EQ(a.vector[63], 63.0f / 8);
  EXPECT_EQ(a.coefficient, -2.5f);
  EXPECT_EQ(a.positions.kind, Kind::From);
  EXPECT_EQ(a.positions.from, 4);
  EXPECT_EQ(s.interventions[1].site, TapSite::AttentionOutput);
  EXPECT_EQ(s.interventions[1].coefficient, 1.0f);
  EXPECT_EQ(s.interventions[1].positions.kind, Kind::All);
  EXPECT_EQ(s.interventions[2].site, TapSite::LayerOutput);
  EXPECT_EQ(s.interventions[2].layers, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(std::bit_cast<uint32_t>(s.interventions[2].vector[5]), 0x80000000u);  // -0 kept bit-exactly
  EXPECT_EQ(s.interventions[2].positions.kind, Kind::Generated);
  const Intervention& h = s.interventions[3];
  EXPECT_EQ(h.kind, Intervention::Kind::AblateHead);
  EXPECT_EQ(h.site, TapSite::AttentionHeadOutputs);
  EXPECT_EQ(h.layers, std::vector<int64_t>{2});
  EXPECT_EQ(h.head, 7);
  EXPECT_EQ(h.positions.kind, Kind::List);
  EXPECT_EQ(h.positions.list, (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(s.interventions[4].layers, std::vector<int64_t>{0});
  EXPECT_FALSE(s.reads_prompt());
}

TEST(TraceSpecJson, RefusesBadNamesNamingFieldAndValue) {
  EXPECT_THAT(error("layers.0.layer_output"),
              AllOf(HasSubstr("activations: must be a list"), HasSubstr("\"layers.0.layer_output\"")));
  EXPECT_THAT(read_error({"logits", 3}), HasSubstr("activations[1]: must be a name string or {"));
  EXPECT_THAT(read_error({"logits", 3}), HasSubstr("got 3"));
  EXPECT_THAT(read_error({"layers.0.attn_out"}),
              AllOf(HasSubstr("activations[0]: \"layers.0.attn_out\": unknown activation name \"attn_out\""),
                    HasSubstr("token_embeddings"), HasSubstr("logits"), HasSubstr("layer_input"),
                    HasSubstr("mlp_neurons"), HasSubstr("layer_output")));
  EXPECT_THAT(read_error({{{"name", "attention_scores"}}}),
              HasSubstr("activations[0].name: \"attention_scores\": unknown activation name"));
  EXPECT_THAT(read_error({"layers.1.attention_norm_output"}),
              AllOf(HasSubstr("\"layers.1.attention_norm_output\""),
                    HasSubstr("OLMo 2 has no pre-norm: read layer_input / layer_mid")));
  EXPECT_THAT(read_error({"mlp_norm_output"}),
              AllOf(HasSubstr("activations[0]: \"mlp_norm_output\""), HasSubstr("OLMo 2 has no pre-norm")));
  EXPECT_THAT(read_error({"layers.0.logits"}),
              HasSubstr("\"layers.0.logits\": logits is model-wide and takes no layer"));
  EXPECT_THAT(read_error({"token_embeddings", "layer_output"}),
              HasSubstr("activations[1]: \"layer_output\": layer_output is per layer: write layers.<N|*|A:B>."));
  EXPECT_THAT(read_error({"layers.3.layer_output"}),
              HasSubstr("activations[0]: \"layers.3.layer_output\": layer 3 is out of range: the model has 3 layers"));
  EXPECT_THAT(read_error({"layers.99999999999999999999.layer_output"}),
              HasSubstr("layer 99999999999999999999 is out of range"));
  EXPECT_THAT(read_error({"layers.2:2.layer_output"}), HasSubstr("layer range 2:2 is empty"));
  EXPECT_THAT(read_error({"layers.2:1.layer_output"}), HasSubstr("layer range 2:1 is empty"));
  EXPECT_THAT(read_error({"layers.1:4.layer_output"}), HasSubstr("layer range 1:4 ends past the last layer"));
  for (const char* sel : {"-1", "a", "1:", ":2", "", "1:2:3", " 1", "*:2"}) {
    EXPECT_THAT(read_error({std::string("layers.") + sel + ".layer_output"}),
                HasSubstr(std::string("layer selector \"") + sel + "\" is not N, * or A:B"))
        << sel;
  }
  EXPECT_THAT(read_error({"layers.layer_output"}),
              HasSubstr("\"layers.layer_output\": expected layers.<N|*|A:B>.<name>"));
}

TEST(TraceSpecJson, RefusesBadReadFieldsNamingFieldAndValue) {
  EXPECT_THAT(read_error({{{"name", "logits"}, {"reduce", "max"}}}),
              HasSubstr("activations[0].reduce: must be \"none\", \"norm\" or \"mean\", got \"max\""));
  EXPECT_THAT(read_error({{{"name", "logits"}, {"positions", {1, 2}}}}),
              HasSubstr("activations[0].positions: must be \"all\", \"prompt\" or \"generated\" (lists of positions "
                        "are for interventions), got a list"));
  EXPECT_THAT(read_error({{{"name", "logits"}, {"positions", "last"}}}), HasSubstr("got \"last\""));
  EXPECT_THAT(read_error({{{"name", "logits"}, {"reduc", "norm"}}}),
              HasSubstr("activations[0].reduc: unknown field \"reduc\" (known here: name, reduce, positions)"));
  EXPECT_THAT(read_error({{{"reduce", "norm"}}}), HasSubstr("activations[0].name: must be a name string"));
  EXPECT_THAT(read_error({{{"name", 7}}}), HasSubstr("activations[0].name: must be a name string such as "
                                                     "\"layers.0.layer_output\", got 7"));
}

TEST(TraceSpecJson, RefusesDuplicateResponseKeys) {
  EXPECT_THAT(read_error({"layers.*.layer_output", {{"name", "layers.1.layer_output"}, {"positions", "prompt"}}}),
              HasSubstr("activations[1]: asks again for \"layers.1.layer_output\", which activations[0] already "
                        "reads"));
  EXPECT_THAT(read_error({"logits", "logits"}), HasSubstr("activations[1]: asks again for \"logits\""));
  EXPECT_THAT(read_error({{{"name", "layers.0:2.mlp_output"}, {"reduce", "norm"}},
                          "layers.1:3.mlp_output",
                          {{"name", "layers.1.mlp_output"}, {"reduce", "norm"}}}),
              HasSubstr("activations[2]: asks again for \"layers.1.mlp_output:norm\""));
  // Different names (aliases included) or reductions are different keys.
  EXPECT_EQ(parse(list({"layers.0.layer_mid",
                        "layers.0.mlp_input",
                        "logits",
                        "lm_head_output",
                        {{"name", "logits"}, {"reduce", "norm"}}}))
                .reads.size(),
            5u);
}

TEST(TraceSpecJson, RefusesBadInterventionsNamingFieldAndValue) {
  const auto error_of = [](const json& entry) {
    return error(nullptr, json::array({steer("layers.0.mlp_output"), entry}));
  };
  EXPECT_THAT(error(nullptr, steer("layers.0.mlp_output")), HasSubstr("interventions: must be a list, got an object"));
  EXPECT_THAT(error_of("add"), HasSubstr("interventions[1]: must be an object"));
  EXPECT_THAT(error_of(json::object()),
              HasSubstr("interventions[1].type: must be \"add\" or \"ablate_head\", got nothing"));
  EXPECT_THAT(error_of({{"type", "scale"}}), HasSubstr("interventions[1].type: must be \"add\" or \"ablate_head\", "
                                                       "got \"scale\""));
  EXPECT_THAT(error_of(steer("layers.0.layer_mid")),
              HasSubstr("interventions[1].name: \"layers.0.layer_mid\": add changes only layers.<sel>.layer_output, "
                        "attention_output or mlp_output"));
  EXPECT_THAT(error_of(steer("final_norm_output")), HasSubstr("interventions[1].name: \"final_norm_output\": add"));
  EXPECT_THAT(error_of(steer("layers.4.layer_output")), HasSubstr("interventions[1].name: \"layers.4.layer_output\": "
                                                                  "layer 4 is out of range"));
  json e = steer("layers.0.layer_output");
  e.erase("vector");
  EXPECT_THAT(error_of(e),
              HasSubstr("interventions[1].vector: must be base64 of 64 little-endian float32, got nothing"));
  e["vector"] = base64_floats(std::vector<float>(63, 1.0f));
  EXPECT_THAT(error_of(e), HasSubstr("interventions[1].vector: decodes to 252 bytes, need 4·hidden_size = 256"));
  e["vector"] = "AAAA AAA";
  EXPECT_THAT(error_of(e), HasSubstr("interventions[1].vector is not base64: character 4 is byte 32"));
  std::vector<float> v(64, 0.5f);
  v[9] = std::nanf("");
  e["vector"] = base64_floats(v);
  EXPECT_THAT(error_of(e), HasSubstr("interventions[1].vector: entry 9 is not finite"));
  v[9] = -INFINITY;
  e["vector"] = base64_floats(v);
  EXPECT_THAT(error_of(e), HasSubstr("interventions[1].vector: entry 9 is not finite"));
  e = steer("layers.0.layer_output");
  for (const json& c : {json("2"), json(true), json(NAN), json(1e300)}) {
    e["coefficient"] = c;
    EXPECT_THAT(error_of(e), AllOf(HasSubstr("interventions[1].coefficient: must be a finite float32 number, got "),
                                   HasSubstr(c.dump())))
        << c.dump();
  }
  // Each finite, their product not: 3e38 · 3e38 overflows float32.
  v.assign(64, 0.5f);
  v[5] = 3e38f;
  e = steer("layers.0.layer_output");
  e["vector"] = base64_floats(v);
  e["coefficient"] = 3e38;
  EXPECT_THAT(error_of(e), HasSubstr("interventions[1].coefficient: times vector entry 5"));
  e["coefficient"] = 1.0;
  EXPECT_NO_THROW(parse(nullptr, json::array({e}))) << "within float32";
  e = steer("layers.0.layer_output");
  e["head"] = 2;
  EXPECT_THAT(error_of(e), HasSubstr("interventions[1].head: unknown field \"head\" (known here: type, name, vector, "
                                     "coefficient, positions)"));
}

TEST(TraceSpecJson, RefusesBadHeadAblationsNamingFieldAndValue) {
  const auto error_of = [](const json& entry) { return error(nullptr, json::array({entry})); };
  const auto ablate = [](const json& layer, const json& head) {
    return json{{"type", "ablate_head"}, {"layer", layer}, {"head", head}};
  };
  EXPECT_THAT(error_of(ablate(3, 0)), HasSubstr("interventions[0].layer: must be an integer in [0, 3), got 3"));
  EXPECT_THAT(error_of(ablate("1", 0)), HasSubstr("interventions[0].layer: must be an integer in [0, 3), got \"1\""));
  EXPECT_THAT(error_of(ablate(0, 8)), HasSubstr("interventions[0].head: must be an integer in [0, 8), got 8"));
  EXPECT_THAT(error_of(ablate(0, -1)), HasSubstr("interventions[0].head: must be an integer in [0, 8), got -1"));
  EXPECT_THAT(error_of(ablate(0, 1.5)), HasSubstr("interventions[0].head: must be an integer in [0, 8), got 1.5"));
  EXPECT_THAT(error_of(ablate(0, json(18446744073709551615ull))), HasSubstr("got 18446744073709551615"));
  EXPECT_THAT(error_of({{"type", "ablate_head"}, {"layer", 0}}), HasSubstr("interventions[0].head: is required"));
  EXPECT_THAT(error_of({{"type", "ablate_head"}, {"head", 0}}), HasSubstr("interventions[0].layer: is required"));
  json e = ablate(0, 1);
  e["name"] = "layers.0.attention_premix";
  EXPECT_THAT(error_of(e), HasSubstr("interventions[0].name: unknown field \"name\" (known here: type, layer, head, "
                                     "positions)"));
}

TEST(TraceSpecJson, RefusesBadInterventionPositions) {
  const auto error_at = [](const json& positions) {
    json e{{"type", "ablate_head"}, {"layer", 1}, {"head", 1}, {"positions", positions}};
    return error(nullptr, json::array({e}));
  };
  EXPECT_THAT(error_at({3, 1}), HasSubstr("interventions[0].positions[1]: 1 does not come after 3: positions must be "
                                          "ascending, without repeats"));
  EXPECT_THAT(error_at({2, 2}), HasSubstr("interventions[0].positions[1]: 2 does not come after 2"));
  EXPECT_THAT(error_at({0, -1}), HasSubstr("interventions[0].positions[1]: must be an integer ≥ 0, got -1"));
  EXPECT_THAT(error_at({0, "1"}), HasSubstr("interventions[0].positions[1]: must be an integer ≥ 0, got \"1\""));
  EXPECT_THAT(error_at(json::array()), HasSubstr("interventions[0].positions: lists no position"));
  EXPECT_THAT(error_at(json::object({{"from", -2}})),
              HasSubstr("interventions[0].positions.from: must be an integer ≥ 0, got -2"));
  EXPECT_THAT(error_at(json::object({{"frm", 2}})),
              HasSubstr("interventions[0].positions.frm: unknown field \"frm\" (known here: "
                        "from)"));
  EXPECT_THAT(error_at({{"from", 1}, {"to", 2}}), HasSubstr("interventions[0].positions.to: unknown field \"to\""));
  EXPECT_THAT(error_at(json::object()), HasSubstr("interventions[0].positions.from: is required"));
  EXPECT_THAT(error_at("some"), HasSubstr("interventions[0].positions: must be \"all\", \"prompt\" or \"generated\", a "
                                          "list of positions or {\"from\": p}, got \"some\""));
  EXPECT_THAT(error_at(3), HasSubstr("got 3"));
}

}  // namespace
}  // namespace olmo2::trace
