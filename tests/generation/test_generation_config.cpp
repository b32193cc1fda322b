// generation_config.json of a model directory: stop ids and sampling defaults
// (runtime/generation/generation_config.h; docs/architecture.md §8). The files are
// written here in transformers' GenerationConfig.to_json_file format.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "runtime/generation/generation_config.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 100352;

struct Dir {
  test::TempDir dir;
  std::string path() const { return dir.file("generation_config.json"); }
  GenerationConfig read(const std::string& text) const {
    std::ofstream(path()) << text;
    const std::optional<GenerationConfig> g = read_generation_config(dir.path(), kVocab);
    if (!g) ADD_FAILURE() << "no generation config read";
    return g.value_or(GenerationConfig{});
  }
  std::string error(const std::string& text) const {
    std::ofstream(path()) << text;
    return test::input_error([&] { read_generation_config(dir.path(), kVocab); });
  }
};

TEST(GenerationConfig, AnAbsentFileIsNone) {
  test::TempDir dir;
  EXPECT_FALSE(read_generation_config(dir.path(), kVocab));
}

TEST(GenerationConfig, EosAnIdOrAList) {
  Dir d;
  GenerationConfig g = d.read(R"({"_from_model_config": true, "eos_token_id": 100257, "pad_token_id": 100277,
                                  "transformers_version": "4.48.0"})");
  EXPECT_EQ(g.path, d.path());
  EXPECT_THAT(g.eos_token_ids, ElementsAre(100257));
  EXPECT_EQ(g.pad_token_id, 100277);
  EXPECT_FALSE(g.bos_token_id);
  EXPECT_FALSE(g.defaults.any());
  EXPECT_EQ(g.defaults.describe(), "none");
  g = d.read(R"({"eos_token_id": [100257, 100265], "bos_token_id": 100257})");
  EXPECT_THAT(g.eos_token_ids, ElementsAre(100257, 100265));
  EXPECT_EQ(g.bos_token_id, 100257);
  EXPECT_FALSE(g.pad_token_id);
}

TEST(GenerationConfig, NullsAreAbsentAndUnknownFieldsIgnored) {
  Dir d;
  const GenerationConfig g = d.read(R"({"eos_token_id": null, "pad_token_id": null, "bos_token_id": null,
      "temperature": null, "top_p": null, "top_k": null, "min_p": null, "repetition_penalty": null,
      "max_new_tokens": null, "do_sample": null, "num_beams": 1, "use_cache": true,
      "cache_implementation": "static", "suppress_tokens": [1, 2]})");
  EXPECT_TRUE(g.eos_token_ids.empty());
  EXPECT_FALSE(g.pad_token_id || g.bos_token_id);
  EXPECT_FALSE(g.defaults.any());
  EXPECT_FALSE(g.defaults.do_sample);
}

TEST(GenerationConfig, EverySamplingFieldIsRead) {
  Dir d;
  const GenerationConfig g = d.read(R"({"eos_token_id": 100265, "do_sample": true, "temperature": 0.6,
      "top_p": 0.9, "top_k": 50, "min_p": 0.05, "repetition_penalty": 1.1, "max_new_tokens": 512})");
  const GenerationDefaults& s = g.defaults;
  EXPECT_EQ(s.temperature, 0.6);
  EXPECT_EQ(s.top_p, 0.9);
  EXPECT_EQ(s.top_k, 50);
  EXPECT_EQ(s.min_p, 0.05);
  EXPECT_EQ(s.repetition_penalty, 1.1);
  EXPECT_EQ(s.max_new_tokens, 512);
  EXPECT_EQ(s.do_sample, true);
  EXPECT_TRUE(s.any());
  EXPECT_EQ(s.describe(),
            "temperature 0.6, top_p 0.9, top_k 50, min_p 0.05, repetition_penalty 1.1, max_new_tokens 512, "
            "do_sample true");
}

TEST(GenerationConfig, DoSampleAloneIsNoSamplingValue) {
  Dir d;
  const GenerationConfig g = d.read(R"({"do_sample": false})");
  EXPECT_FALSE(g.defaults.any());
  EXPECT_EQ(g.defaults.describe(), "do_sample false");
}

TEST(GenerationConfig, TopKMinusOneIsNoLimit) {
  Dir d;
  EXPECT_EQ(d.read(R"({"top_k": -1})").defaults.top_k, 0);
  EXPECT_EQ(d.read(R"({"top_k": 0})").defaults.top_k, 0);
}

TEST(GenerationConfig, BadValuesNameTheFileAndTheField) {
  Dir d;
  struct Bad {
    std::string text, message;
  };
  const Bad cases[] = {
      {R"({"temperature": "0.7"})", "field \"temperature\" must be a number"},
      {R"({"top_k": 40.5})", "field \"top_k\" must be an integer"},
      {R"({"max_new_tokens": "many"})", "field \"max_new_tokens\" must be an integer"},
      {R"({"do_sample": 1})", "field \"do_sample\" must be true or false"},
      {R"({"eos_token_id": "100257"})", "field \"eos_token_id\" must be a token id or a list of token ids"},
      {R"({"eos_token_id": [100257, [1]]})", "field \"eos_token_id\" must be a token id or a list"},
      {R"({"pad_token_id": 1.5})", "field \"pad_token_id\" must be a token id"},
      {R"({"temperature": -1})", "temperature must be a finite number ≥ 0"},
      {R"({"top_p": 0})", "top_p must be in (0, 1], got 0"},
      {R"({"top_p": 1.5})", "top_p must be in (0, 1], got 1.5"},
      {R"({"top_k": -2})", "top_k must be ≥ 0"},
      {R"({"min_p": 2})", "min_p must be in [0, 1], got 2"},
      {R"({"repetition_penalty": 0})", "repetition_penalty must be a finite number > 0"},
      {R"({"max_new_tokens": 0})", "field \"max_new_tokens\" must be at least 1, got 0"},
      {R"({"eos_token_id": 100352})", "field \"eos_token_id\" is 100352, outside the vocabulary [0, 100352)"},
      {R"({"eos_token_id": [100257, -1]})", "field \"eos_token_id\" is -1, outside the vocabulary"},
      {R"({"bos_token_id": 18446744073709551615})", "field \"bos_token_id\" is 18446744073709551615, outside"},
  };
  for (const Bad& b : cases) {
    EXPECT_THAT(d.error(b.text), AllOf(HasSubstr(d.path()), HasSubstr(b.message))) << b.text;
  }
}

TEST(GenerationConfig, NotAJsonObjectIsRefused) {
  Dir d;
  for (const char* text : {"[1, 2]", "100257"}) EXPECT_EQ(d.error(text), d.path() + " is not a JSON object") << text;
  // Not JSON at all: the parser's message, with where it stopped.
  for (const char* text : {"{\"eos_token_id\": ", ""}) {
    EXPECT_THAT(d.error(text), ::testing::StartsWith(d.path() + " is not valid JSON: ")) << text;
    EXPECT_THAT(d.error(text), ::testing::HasSubstr("line 1, column")) << text;
  }
}

TEST(ApplyGenerateDefaults, GreedyUnlessTheFileSamples) {
  SamplingParams given;
  given.temperature = 0.0, given.top_k = 0, given.top_p = 1.0, given.seed = 7;
  GenerationDefaults d;
  d.temperature = 0.6, d.top_p = 0.9, d.top_k = 50, d.min_p = 0.1;
  for (std::optional<bool> do_sample : {std::optional<bool>(), std::optional<bool>(false)}) {
    d.do_sample = do_sample;
    const SamplingParams s = apply_generate_defaults(given, d, false, false, false);
    EXPECT_EQ(s.temperature, 0.0);
    EXPECT_EQ(s.top_k, 0);
    EXPECT_EQ(s.top_p, 1.0);
    EXPECT_EQ(s.min_p, 0.0);
    EXPECT_EQ(s.seed, 7u);
  }
}

TEST(ApplyGenerateDefaults, SamplingTakesTheFilesValuesWhereNoneWasGiven) {
  SamplingParams given;
  given.temperature = 0.0, given.top_k = 0, given.top_p = 1.0, given.seed = 7;
  GenerationDefaults d;
  d.do_sample = true, d.temperature = 0.6, d.top_p = 0.9, d.top_k = 50, d.min_p = 0.1;
  SamplingParams s = apply_generate_defaults(given, d, false, false, false);
  EXPECT_EQ(s.temperature, 0.6);
  EXPECT_EQ(s.top_k, 50);
  EXPECT_EQ(s.top_p, 0.9);
  EXPECT_EQ(s.min_p, 0.1);
  EXPECT_EQ(s.seed, 7u);
  // The command line's own values win.
  SamplingParams mine = given;
  mine.temperature = 1.3, mine.top_k = 5, mine.top_p = 0.5;
  s = apply_generate_defaults(mine, d, true, true, true);
  EXPECT_EQ(s.temperature, 1.3);
  EXPECT_EQ(s.top_k, 5);
  EXPECT_EQ(s.top_p, 0.5);
  // do_sample alone: what transformers 5's generate() applies when neither the file nor
  // the caller sets a value (GenerationConfig._get_default_generation_params: temperature
  // 1.0, top_k 50, top_p 1.0); a top_k given on the command line stays.
  GenerationDefaults bare;
  bare.do_sample = true;
  s = apply_generate_defaults(given, bare, false, false, false);
  EXPECT_EQ(s.temperature, 1.0);
  EXPECT_EQ(s.top_k, 50);
  EXPECT_EQ(s.top_p, 1.0);
  EXPECT_EQ(s.min_p, 0.0);
  EXPECT_EQ(apply_generate_defaults(given, bare, false, true, false).top_k, 0);
  // top_k 0 or −1 in the file: no limit, as transformers adds no top-k step then.
  bare.top_k = 0;
  EXPECT_EQ(apply_generate_defaults(given, bare, false, false, false).top_k, 0);
}

}  // namespace
}  // namespace olmo2
