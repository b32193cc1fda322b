#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/model/config.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A config.json as the hub ships OLMo-2-0425-1B (transformers 4.x field names).
json hub_config() {
  return json::parse(R"({
    "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": null, "eos_token_id": 100257, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 4096, "num_attention_heads": 16, "num_hidden_layers": 16,
    "num_key_value_heads": 16, "pad_token_id": 100277, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 500000, "tie_word_embeddings": false,
    "torch_dtype": "float32", "use_cache": true, "vocab_size": 100352})");
}

std::string error_of(const json& j) {
  try {
    ModelConfig::from_json(j, "config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Config, ReadsHubConfigAndDerivesHeadDim) {
  const ModelConfig c = ModelConfig::from_json(hub_config(), "config.json");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{100257});
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_EQ(c.parameter_count(), 1484916736);
}

TEST(Config, ReadsTransformers5RopeParameters) {
  json j = hub_config();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  EXPECT_EQ(ModelConfig::from_json(j, "c").rope_theta, 10000.0);
  j["rope_theta"] = 500000;
  EXPECT_THAT(error_of(j), HasSubstr("contradicts rope_parameters.rope_theta"));
  j.erase("rope_theta");
  j["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_THAT(error_of(j), HasSubstr("rope_type \"yarn\""));
}

TEST(Config, RefusesOtherArchitecturesByName) {
  json j = hub_config();
  j["architectures"] = {"LlamaForCausalLM"};
  EXPECT_THAT(error_of(j), HasSubstr("architecture \"LlamaForCausalLM\" is not supported"));
  j = hub_config();
  j["model_type"] = "llama";
  EXPECT_THAT(error_of(j), HasSubstr("model_type"));
}

TEST(Config, MissingFieldsAreNamed) {
  for (const char* f : {"architectures", "vocab_size", "hidden_size", "intermediate_size",
                        "num_hidden_layers", "num_attention_heads", "max_position_embeddings",
                        "rms_norm_eps", "rope_theta"}) {
    json j = hub_config();
    j.erase(f);
    EXPECT_THAT(error_of(j), HasSubstr(std::string("\"") + f + "\" is missing")) << f;
  }
  json j = hub_config();
  j.erase("num_key_value_heads");  // defaults to num_attention_heads, as in transformers
  EXPECT_EQ(ModelConfig::from_json(j, "c").num_key_value_heads, 16);
}

TEST(Config, ContradictoryOrBadValuesAreNamed) {
  auto with = [](const char* field, json v) {
    json j = hub_config();
    j[field] = std::move(v);
    return error_of(j);
  };
  EXPECT_THAT(with("num_attention_heads", 15), HasSubstr("hidden_size 2048 is not divisible by num_attention_heads 15"));
  EXPECT_THAT(with("num_key_value_heads", 3), HasSubstr("num_attention_heads 16 is not divisible by num_key_value_heads 3"));
  EXPECT_THAT(with("head_dim", 64), HasSubstr("head_dim 64 contradicts"));
  EXPECT_THAT(with("hidden_size", "2048"), HasSubstr("\"hidden_size\" must be an integer"));
  EXPECT_THAT(with("hidden_size", -4), HasSubstr("\"hidden_size\" must be positive"));
  EXPECT_THAT(with("attention_bias", true), HasSubstr("attention_bias"));
  EXPECT_THAT(with("hidden_act", "gelu"), HasSubstr("hidden_act"));
  EXPECT_THAT(with("rope_scaling", json{{"type", "linear"}}), HasSubstr("rope_scaling"));
  EXPECT_THAT(with("eos_token_id", 200000), HasSubstr("outside the vocabulary"));
  EXPECT_THAT(with("eos_token_id", json{100257, 200001}), HasSubstr("eos_token_id\" is 200001"));
  EXPECT_THAT(with("hidden_size", int64_t{1} << 62), HasSubstr("above the supported"));
  json j = hub_config();
  j["eos_token_id"] = {100257, 100265};  // instruct checkpoints stop at either
  EXPECT_EQ(ModelConfig::from_json(j, "c").eos_token_ids, (std::vector<int64_t>{100257, 100265}));
  EXPECT_THAT(with("torch_dtype", "float64"), HasSubstr("torch_dtype"));
  EXPECT_THAT(with("rms_norm_eps", 0), HasSubstr("rms_norm_eps"));
}

TEST(Config, LoadNamesTheFileWhenMissingOrNotJson) {
  test::TempDir dir;
  try {
    ModelConfig::load(dir.path());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("config.json"));
  }
  std::ofstream(dir.file("config.json")) << "{ not json";
  try {
    ModelConfig::load(dir.path());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("not valid JSON"));
  }
}

TEST(Config, ToJsonRoundTrips) {
  json j = hub_config();
  j["num_key_value_heads"] = 4;
  const ModelConfig c = ModelConfig::from_json(j, "c");
  const ModelConfig d = ModelConfig::from_json(c.to_json(), "round trip");
  EXPECT_EQ(d.to_json(), c.to_json());
  EXPECT_EQ(d.num_key_value_heads, 4);
  EXPECT_EQ(d.parameter_count(), c.parameter_count());
}

}  // namespace
}  // namespace olmo2
