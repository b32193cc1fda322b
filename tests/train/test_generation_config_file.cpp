// The generation_config.json a checkpoint writes: the config's ids, and the stop ids and
// sampling values kept from the model the run started from (runtime/train/
// generation_config_file.h; docs/architecture.md §7 "Checkpoints"). The input files are
// written here in transformers' GenerationConfig.to_json_file format.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "runtime/train/generation_config_file.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using nlohmann::json;

constexpr int64_t kVocab = 100352;  // the dolma2 model vocabulary the ids are checked against

json keep(const test::TempDir& dir, const std::string& text) {
  std::ofstream(dir.file("generation_config.json")) << text;
  return generation_config_to_keep(dir.path(), kVocab);
}

ModelConfig olmo2_ids() {
  ModelConfig c;
  c.eos_token_ids = {100257}, c.pad_token_id = 100277;
  return c;
}

TEST(GenerationConfigFile, NothingToKeepWithoutAFile) {
  test::TempDir dir;
  EXPECT_EQ(generation_config_to_keep(dir.path(), kVocab), json::object());
  EXPECT_EQ(generation_config_to_keep("", kVocab), json::object());
  // The checkpoint's file is then the config's ids alone, as transformers derives it.
  EXPECT_EQ(checkpoint_generation_config(olmo2_ids(), json::object()).dump(),
            R"({"_from_model_config":true,"eos_token_id":100257,"pad_token_id":100277})");
}

TEST(GenerationConfigFile, StopIdsAndSamplingValuesAreKeptOthersDropped) {
  test::TempDir dir;
  const json kept = keep(dir, R"({"_from_model_config": false, "bos_token_id": 100257, "eos_token_id": 100265,
      "pad_token_id": 1, "do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 50, "min_p": null,
      "repetition_penalty": 1.05, "max_new_tokens": 512, "num_beams": 1, "transformers_version": "4.48.0"})");
  EXPECT_EQ(kept, (json{{"eos_token_id", {100265}}, {"do_sample", true}, {"temperature", 0.6}, {"top_p", 0.95},
                        {"top_k", 50}, {"repetition_penalty", 1.05}, {"max_new_tokens", 512}}));
  ModelConfig c = olmo2_ids();
  c.bos_token_id = 100257;
  EXPECT_EQ(checkpoint_generation_config(c, kept),
            (json{{"_from_model_config", true}, {"eos_token_id", {100257, 100265}}, {"pad_token_id", 100277},
                  {"bos_token_id", 100257}, {"do_sample", true}, {"temperature", 0.6}, {"top_p", 0.95},
                  {"top_k", 50}, {"repetition_penalty", 1.05}, {"max_new_tokens", 512}}));
}

TEST(GenerationConfigFile, TheConfigsEosComesFirstAndNoIdTwice) {
  test::TempDir dir;
  const json kept = keep(dir, R"({"eos_token_id": [100265, 100257, 100265]})");
  EXPECT_EQ(checkpoint_generation_config(olmo2_ids(), kept)["eos_token_id"], json({100257, 100265}));
  EXPECT_EQ(checkpoint_generation_config(olmo2_ids(), keep(dir, R"({"eos_token_id": [100257]})"))["eos_token_id"],
            json(100257));
  ModelConfig none;  // a config without eos ids takes the file's
  EXPECT_EQ(checkpoint_generation_config(none, kept)["eos_token_id"], json({100265, 100257}));
}

TEST(GenerationConfigFile, WrongTypesAreNamed) {
  test::TempDir dir;
  const std::string path = dir.file("generation_config.json");
  struct Bad {
    std::string text, message;
  };
  const Bad cases[] = {
      {R"({"eos_token_id": "100257"})",
       "field \"eos_token_id\" must be a token id or a list of token ids, got \"100257\""},
      {R"({"eos_token_id": [100257, -1]})", "field \"eos_token_id\" is -1, outside the vocabulary [0, 100352)"},
      {R"({"eos_token_id": [100400]})", "field \"eos_token_id\" is 100400, outside the vocabulary [0, 100352)"},
      {R"({"temperature": -1})", "temperature must be a finite number ≥ 0"},
      {R"({"max_new_tokens": 0})", "field \"max_new_tokens\" must be at least 1, got 0"},
      {R"({"eos_token_id": [1.5]})", "field \"eos_token_id\" must be a token id"},
      {R"({"temperature": "hot"})", "field \"temperature\" must be a number, got \"hot\""},
      {R"({"top_k": 2.5})", "field \"top_k\" must be an integer, got 2.5"},
      {R"({"max_new_tokens": true})", "field \"max_new_tokens\" must be an integer"},
      {R"({"do_sample": 1})", "field \"do_sample\" must be true or false, got 1"},
      {R"([1])", "is not a JSON object"},
  };
  for (const Bad& b : cases) {
    std::ofstream(path) << b.text;
    EXPECT_THAT(test::input_error([&] { generation_config_to_keep(dir.path(), kVocab); }),
                AllOf(HasSubstr(path), HasSubstr(b.message)))
        << b.text;
  }
}

}  // namespace
}  // namespace olmo2
