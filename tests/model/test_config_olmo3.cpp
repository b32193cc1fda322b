// Olmo 3's config.json (docs/architecture.md §3): layer types, window and RoPE per layer
// type in transformers 4's and 5's spellings, the refusals, and to_json against what
// transformers 5.24 writes (tests/model/fixtures/olmo3_configs.json, written by
// tests/model/make_olmo3_config_fixtures.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/model/config.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json fixture_cases() {
  const std::string path = test::source_path("tests/model/fixtures/olmo3_configs.json");
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path + " (tests/model/make_olmo3_config_fixtures.py writes it)");
  return json::parse(in)["cases"];
}

json fixture(const std::string& name, const char* which) {
  for (const json& c : fixture_cases()) {
    if (c["name"] == name) return c[which];
  }
  throw std::runtime_error("no fixture case " + name);
}

std::string error_of(const json& j) {
  try {
    ModelConfig::from_json(j, "config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ConfigOlmo3, ReadsTheReleased7BInBothSpellings) {
  const ModelConfig c = ModelConfig::from_json(fixture("released-7b-transformers4", "input"), "c");
  EXPECT_TRUE(c.olmo3());
  EXPECT_EQ(c.head_dim, 128);
  ASSERT_EQ(c.layer_types.size(), 32u);
  for (int64_t l = 0; l < 32; ++l) {
    const bool full = (l + 1) % 4 == 0;
    EXPECT_EQ(c.layer_types[static_cast<size_t>(l)], full ? AttentionType::Full : AttentionType::Sliding) << l;
    EXPECT_EQ(c.attention_window(l), full ? 0 : 4096) << l;
    EXPECT_EQ(c.rope_parameters(l), full ? c.rope_full : c.rope_sliding) << l;
  }
  EXPECT_TRUE(c.has_sliding_layers());
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.rope_full.type, "yarn");
  EXPECT_EQ(c.rope_full.theta, 500000.0);
  EXPECT_EQ(c.rope_full.factor, 8.0);
  EXPECT_EQ(c.rope_full.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_full.attention_factor, 1.2079441541679836);
  EXPECT_EQ(c.rope_full.beta_fast, 32.0);
  EXPECT_EQ(c.rope_full.beta_slow, 1.0);
  EXPECT_TRUE(c.rope_full.truncate);
  EXPECT_EQ(c.rope_sliding.type, "default");
  EXPECT_EQ(c.rope_sliding.theta, 500000.0);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.max_position_embeddings, 65536);
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_EQ(c.parameter_count(), 7298011136);  // transformers on the meta device (configs/olmo3-7b)

  // transformers 5.24's own writing of the same config reads as the same model.
  const ModelConfig d = ModelConfig::from_json(fixture("released-7b-transformers4", "saved"), "d");
  EXPECT_EQ(d.layer_types, c.layer_types);
  EXPECT_EQ(d.rope_full, c.rope_full);
  EXPECT_EQ(d.rope_sliding, c.rope_sliding);
  EXPECT_EQ(d.to_json(), c.to_json());
}

TEST(ConfigOlmo3, DefaultsAreOlmo3Configs) {
  const ModelConfig c = ModelConfig::from_json(fixture("tiny-defaults", "input"), "c");
  EXPECT_EQ(c.layer_types, (std::vector<AttentionType>{AttentionType::Sliding, AttentionType::Sliding,
                                                       AttentionType::Sliding, AttentionType::Full}));
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.rope_full.type, "default");
  EXPECT_EQ(c.rope_full.theta, 500000.0);
  EXPECT_EQ(c.rope_sliding, c.rope_full);
  const ModelConfig y = ModelConfig::from_json(fixture("tiny-yarn-defaults", "input"), "y");
  EXPECT_EQ(y.rope_full.type, "yarn");  // from the old "type" key
  EXPECT_EQ(y.rope_full.factor, 2.0);
  EXPECT_EQ(y.rope_full.original_max_position_embeddings, 256);  // max_position_embeddings
  EXPECT_FALSE(y.rope_full.attention_factor.has_value());
  EXPECT_EQ(y.rope_full.beta_fast, 32.0);
  EXPECT_EQ(y.rope_full.beta_slow, 1.0);
  const ModelConfig t = ModelConfig::from_json(fixture("tiny-transformers5", "input"), "t");
  EXPECT_EQ(t.attention_window(0), 16);
  EXPECT_EQ(t.attention_window(1), 0);
  EXPECT_EQ(t.rope_parameters(1).beta_fast, 16.0);
  EXPECT_EQ(t.rope_parameters(1).beta_slow, 2.0);
  EXPECT_EQ(t.rope_parameters(0).theta, 10000.0);
}

// For every case: to_json writes each key transformers' save_pretrained writes with the
// same value (so transformers reads olmo2's config.json as this model), nothing of the
// 4.x spelling, and reads back to itself.
TEST(ConfigOlmo3, ToJsonWritesWhatTransformersWrites) {
  const json cases = fixture_cases();
  ASSERT_EQ(cases.size(), 4u);
  for (const json& k : cases) {
    const std::string name = k["name"];
    const ModelConfig c = ModelConfig::from_json(k["input"], name);
    const json out = c.to_json();
    const json& saved = k["saved"];
    for (const auto& [key, want] : saved.items()) {
      if (key == "dtype") {  // transformers 5 reads torch_dtype as dtype
        EXPECT_EQ(out["torch_dtype"], want) << name;
      } else if (key == "rope_parameters") {
        for (const char* type : {"full_attention", "sliding_attention"}) {
          const json& w = want[type];
          const json& got = out[key][type];
          for (const auto& [f, v] : w.items()) {
            if (f == "type") continue;  // the old spelling of rope_type, which we write
            EXPECT_EQ(got.value(f, json()), v) << name << " " << type << "." << f;
          }
          for (const auto& [f, v] : got.items()) {  // more only where it is the default
            if (w.contains(f)) continue;
            EXPECT_TRUE((f == "beta_fast" && v == 32) || (f == "beta_slow" && v == 1)) << name << " " << f << " " << v;
          }
        }
      } else {
        EXPECT_EQ(out.value(key, json("absent")), want) << name << " " << key;
      }
    }
    EXPECT_FALSE(out.contains("rope_theta")) << name;
    EXPECT_FALSE(out.contains("rope_scaling")) << name;
    const ModelConfig again = ModelConfig::from_json(out, "round trip");
    EXPECT_EQ(again.to_json(), out) << name;
    EXPECT_EQ(again.rope_full, c.rope_full) << name;
    EXPECT_EQ(again.rope_sliding, c.rope_sliding) << name;
    EXPECT_EQ(again.layer_types, c.layer_types) << name;
    EXPECT_EQ(again.sliding_window, c.sliding_window) << name;
  }
}

TEST(ConfigOlmo3, RefusesBadValuesNamingFieldAndValue) {
  // Each mutation of the released config (transformers 4 spelling) or of the tiny one
  // (transformers 5 spelling), and the message it must give.
  const json v4 = fixture("released-7b-transformers4", "input");
  const json v5 = fixture("tiny-transformers5", "input");
  struct Case {
    const json* base;
    std::function<void(json&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {&v5, [](json& j) { j["layer_types"].erase(0); }, "\"layer_types\" has 3 entries but num_hidden_layers is 4"},
      {&v5, [](json& j) { j["layer_types"][1] = "chunked_attention"; }, "\"chunked_attention\" at index 1"},
      {&v5, [](json& j) { j["layer_types"] = "sliding_attention"; }, "\"layer_types\" must be a list"},
      {&v5, [](json& j) { j["sliding_window"] = 0; }, "\"sliding_window\" must be positive, got 0"},
      {&v5, [](json& j) { j["sliding_window"] = -16; }, "\"sliding_window\" must be positive, got -16"},
      {&v5, [](json& j) { j["sliding_window"] = "16"; }, "\"sliding_window\" must be an integer, got \"16\""},
      {&v5, [](json& j) { j["sliding_window"] = nullptr; }, "\"sliding_window\" is null but layer_types has sliding"},
      {&v5, [](json& j) { j["rope_parameters"]["full_attention"]["rope_type"] = "linear"; },
       "\"rope_parameters.full_attention.rope_type\" is \"linear\"; supported: \"default\", \"yarn\""},
      {&v4, [](json& j) { j["rope_scaling"]["rope_type"] = "dynamic"; }, "\"rope_scaling.rope_type\" is \"dynamic\""},
      {&v4, [](json& j) { j["rope_scaling"]["factor"] = 0.5; }, "\"rope_scaling.factor\" must be a finite number ≥ 1, got 0.5"},
      {&v4, [](json& j) { j["rope_scaling"]["factor"] = "8"; }, "\"rope_scaling.factor\" must be a number, got \"8\""},
      {&v4, [](json& j) { j["rope_scaling"].erase("factor"); }, "\"rope_scaling.factor\" is missing"},
      {&v4, [](json& j) { j["rope_scaling"]["original_max_position_embeddings"] = 0; },
       "\"rope_scaling.original_max_position_embeddings\" must be positive, got 0"},
      {&v4, [](json& j) { j["rope_scaling"]["original_max_position_embeddings"] = 8192.5; },
       "\"rope_scaling.original_max_position_embeddings\" must be an integer, got 8192.5"},
      {&v4, [](json& j) { j["rope_scaling"]["beta_fast"] = 1, j["rope_scaling"]["beta_slow"] = 32; },
       "\"rope_scaling.beta_fast\" is 1, below beta_slow 32"},
      {&v4, [](json& j) { j["rope_scaling"]["beta_slow"] = 0; }, "\"rope_scaling.beta_slow\" must be a finite number > 0, got 0"},
      {&v4, [](json& j) { j["rope_scaling"]["attention_factor"] = 0; },
       "\"rope_scaling.attention_factor\" must be a finite number > 0, got 0"},
      {&v4, [](json& j) { j["rope_scaling"]["attention_factor"] = -1.2; },
       "\"rope_scaling.attention_factor\" must be a finite number > 0, got -1.2"},
      {&v4, [](json& j) { j["rope_scaling"]["mscale"] = 1.0; }, "\"rope_scaling.mscale\" is 1.0; this program does not compute mscale"},
      {&v4, [](json& j) { j["rope_scaling"]["mscale_all_dim"] = 0.5; }, "\"rope_scaling.mscale_all_dim\" is 0.5"},
      {&v5, [](json& j) { j["rope_parameters"]["sliding_attention"]["partial_rotary_factor"] = 0.5; },
       "\"rope_parameters.sliding_attention.partial_rotary_factor\" is 0.5; this program does not compute"},
      {&v4, [](json& j) { j["rope_scaling"]["truncate"] = false; }, "\"rope_scaling.truncate\" is false, which transformers 5.24 ignores"},
      {&v4, [](json& j) { j["rope_scaling"]["low_freq_factor"] = 1; }, "\"rope_scaling.low_freq_factor\" is not a RoPE parameter"},
      {&v5, [](json& j) { j["rope_parameters"]["sliding_attention"]["factor"] = 2; },
       "\"rope_parameters.sliding_attention.factor\" is 2 but the RoPE type is \"default\""},
      {&v5, [](json& j) { j["rope_parameters"]["full_attention"]["rope_theta"] = 0; },
       "\"rope_parameters.full_attention.rope_theta\" must be a positive number, got 0"},
      {&v5, [](json& j) { j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}}; },
       "\"rope_parameters\" has key \"rope_theta\"; an Olmo 3 config nests RoPE per layer type"},
      // The two spellings disagreeing.
      {&v5, [](json& j) { j["rope_scaling"] = {{"factor", 8.0}}; },
       "rope_scaling.factor 8.0 contradicts rope_parameters.full_attention.factor 4.0"},
      {&v5, [](json& j) { j["rope_theta"] = 500000; }, "rope_theta 500000 contradicts rope_parameters.full_attention.rope_theta 10000.0"},
      {&v4, [](json& j) { j["rope_theta"] = 10000; }, "rope_theta 10000 is ambiguous for sliding layers"},
      {&v4, [](json& j) { j["rope_scaling"].erase("rope_type"), j["rope_scaling"]["type"] = "yarn"; },
       "\"rope_scaling.type\" is \"yarn\" but (transformers 5.24's default) rope_type is \"default\""},
      {&v5, [](json& j) { j["rope_parameters"]["full_attention"]["type"] = "default"; },
       "\"rope_parameters.full_attention.type\" is \"default\" but rope_parameters.full_attention.rope_type is \"yarn\""},
      {&v4, [](json& j) { j["model_type"] = "olmo2"; }, "\"model_type\" is \"olmo2\" but architectures says Olmo3ForCausalLM"},
  };
  for (const Case& c : cases) {
    json j = *c.base;
    c.edit(j);
    EXPECT_THAT(error_of(j), HasSubstr(c.message));
  }
  EXPECT_EQ(error_of(v4), "no error");
  EXPECT_EQ(error_of(v5), "no error");
}

TEST(ConfigOlmo3, Olmo2IsAllFullWithPlainRope) {
  const ModelConfig c = ModelConfig::load(test::source_path("tests/golden/fixtures/configs/OLMo-2-0425-1B"));
  EXPECT_FALSE(c.olmo3());
  EXPECT_FALSE(c.has_sliding_layers());
  EXPECT_EQ(c.layer_types, std::vector<AttentionType>(16, AttentionType::Full));
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.rope_full.type, "default");
  EXPECT_EQ(c.rope_full.theta, 500000.0);
  EXPECT_EQ(c.rope_sliding, c.rope_full);
  EXPECT_EQ(c.attention_window(15), 0);
  EXPECT_EQ(c.rope_parameters(15).theta, 500000.0);
  const json out = c.to_json();
  EXPECT_EQ(out["model_type"], "olmo2");
  EXPECT_FALSE(out.contains("layer_types"));
  EXPECT_FALSE(out.contains("sliding_window"));
  for (const char* f : {"layer_types", "sliding_window"}) {
    json j = out;
    j[f] = f == std::string("sliding_window") ? json(4096) : json(std::vector<std::string>(16, "full_attention"));
    EXPECT_THAT(error_of(j), HasSubstr(std::string("\"") + f + "\" is ")) << f;
    EXPECT_THAT(error_of(j), HasSubstr("OLMo 2 has no sliding-window attention")) << f;
  }
  json j = out;
  j["architectures"] = {"Olmo3ForCausalLM"};  // model_type says olmo2
  EXPECT_THAT(error_of(j), HasSubstr("\"model_type\" is \"olmo2\" but architectures says Olmo3ForCausalLM"));
}

TEST(ConfigOlmo3, AFieldByFieldConfigIsOlmo2) {
  ModelConfig c;  // as tests and benches build one
  c.num_hidden_layers = 2;
  c.rope_theta = 10000.0;
  EXPECT_EQ(c.attention_window(1), 0);
  EXPECT_EQ(c.rope_parameters(1).type, "default");
  EXPECT_EQ(c.rope_parameters(0).theta, 10000.0);
  EXPECT_EQ(c.rope_parameters(0), c.rope_parameters(1));
  EXPECT_THROW(c.attention_window(2), ShapeError);
  EXPECT_THROW(c.rope_parameters(-1), ShapeError);
}

TEST(ConfigOlmo3, Olmo3ConfigMakesAValidatedVariantOfAnyConfig) {
  const ModelConfig base = ModelConfig::load(test::source_path("tests/golden/fixtures/configs/OLMo-2-0425-1B"));
  RopeParameters y;
  y.type = "yarn", y.factor = 4, y.original_max_position_embeddings = 64;
  const ModelConfig c = olmo3_config(base, 16, "SF", y);
  EXPECT_TRUE(c.olmo3());
  for (int64_t l = 0; l < 16; ++l) {
    EXPECT_EQ(c.attention_window(l), l % 2 == 0 ? 16 : 0) << l;
    EXPECT_EQ(c.rope_parameters(l).type, l % 2 == 0 ? "default" : "yarn") << l;
    EXPECT_EQ(c.rope_parameters(l).theta, 500000.0) << l;  // base's θ on both types
  }
  EXPECT_EQ(c.rope_full.factor, 4.0);
  EXPECT_EQ(c.rope_full.original_max_position_embeddings, 64);
  EXPECT_EQ(c.parameter_count(), base.parameter_count());
  EXPECT_EQ(c.eos_token_ids, base.eos_token_ids);
  const ModelConfig d = olmo3_config(base, 4096);  // Olmo3Config's pattern, plain RoPE
  for (int64_t l = 0; l < 16; ++l) EXPECT_EQ(d.attention_window(l), (l + 1) % 4 == 0 ? 0 : 4096) << l;
  EXPECT_EQ(d.rope_full, d.rope_sliding);
  ModelConfig hand;  // field by field, as the tests build one
  hand.vocab_size = 32, hand.hidden_size = 16, hand.intermediate_size = 24, hand.num_hidden_layers = 3;
  hand.num_attention_heads = 2, hand.num_key_value_heads = 1, hand.head_dim = 8;
  hand.max_position_embeddings = 64, hand.rms_norm_eps = 1e-6, hand.rope_theta = 10000;
  const ModelConfig h = olmo3_config(hand, 8, "FS");
  EXPECT_EQ(h.attention_window(0), 0);
  EXPECT_EQ(h.attention_window(1), 8);
  EXPECT_EQ(h.attention_window(2), 0);
  EXPECT_EQ(h.rope_parameters(1).theta, 10000.0);
  auto error = [&](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(error([&] { olmo3_config(base, 16, "SX"); }), HasSubstr("layer pattern \"SX\" has 'X'"));
  EXPECT_THAT(error([&] { olmo3_config(base, 0); }), HasSubstr("\"sliding_window\" must be positive, got 0"));
  y.factor = 0.5;
  EXPECT_THAT(error([&] { olmo3_config(base, 16, "", y); }),
              HasSubstr("\"rope_parameters.full_attention.factor\" must be a finite number ≥ 1, got 0.5"));
}

TEST(ConfigOlmo3, SummaryNamesLayerTypesWindowAndRope) {
  const std::string s = ModelConfig::from_json(fixture("released-7b-transformers4", "input"), "c").summary();
  EXPECT_THAT(s, HasSubstr("layer_types             sliding ×24, full ×8 (every 4th full)\n"));
  EXPECT_THAT(s, HasSubstr("sliding_window          4096\n"));
  EXPECT_THAT(s, HasSubstr("rope full_attention     yarn, theta 500000, factor 8, original_max_position_embeddings 8192, "
                           "attention_factor 1.20794, beta_fast 32, beta_slow 1\n"));
  EXPECT_THAT(s, HasSubstr("rope sliding_attention  default, theta 500000\n"));
  EXPECT_THAT(s, HasSubstr("parameters              7298011136\n"));
  const std::string t = ModelConfig::from_json(fixture("tiny-transformers5", "input"), "t").summary();
  EXPECT_THAT(t, HasSubstr("sliding ×2, full ×2 (SFSF)\n"));
}

}  // namespace
}  // namespace olmo2
