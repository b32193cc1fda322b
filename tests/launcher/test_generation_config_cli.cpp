// `olmo2 generate` reads a model directory as transformers does (docs/architecture.md §8,
// "Stop ids and sampling defaults"): generation_config.json's eos ids stop it and its
// values fill what the command line leaves out; the special ids of config.json and
// generation_config.json are checked against the tokenizer (a warning, an error under
// --strict-special-tokens); --generation-config ignore reads config.json alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace olmo2 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using test::run_olmo2;

const std::string kFixture = test::source_path("tests/golden/fixtures/mha-f32");  // vocab 160, eos 158, pad 159

/// A byte-level BPE tokenizer.json for the fixture's ids: ids 0–93 the printable ASCII
/// bytes "!" … "~" (so id 0 is "!", as in dolma2), the other 162 bytes at ids 160 … 321
/// (past the model's 160 rows: the tokenizer must cover every byte), no merges; added
/// special tokens <|endoftext|> 158 and <|pad|> 159, and the non-special added token
/// <|note|> 157.
json tiny_tokenizer() {
  auto utf8 = [](uint32_t cp) {
    return std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  };
  json vocab = json::object();
  int next = 160, unprintable = 0;
  for (uint32_t b = 0; b < 256; ++b) {  // GPT-2's byte alphabet
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    if (b >= 33 && b <= 126) vocab[std::string(1, static_cast<char>(b))] = static_cast<int>(b - 33);
    else if (printable) vocab[utf8(b)] = next++;
    else vocab[utf8(0x100 + static_cast<uint32_t>(unprintable++))] = next++;
  }
  json added = json::array({{{"id", 157}, {"content", "<|note|>"}, {"special", false}},
                            {{"id", 158}, {"content", "<|endoftext|>"}, {"special", true}},
                            {{"id", 159}, {"content", "<|pad|>"}, {"special", true}}});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
}

/// A copy of the mha-f32 fixture with the tiny tokenizer, `config` edits merged into
/// config.json and generation_config.json replaced by `generation` (null: none).
struct ModelDir {
  test::TempDir dir;
  ModelDir(const json& config_edits, const json& generation) {
    for (const auto& f : std::filesystem::directory_iterator(kFixture)) {
      const std::string name = f.path().filename().string();
      if (name == "generation_config.json") continue;
      std::filesystem::copy_file(f.path(), dir.file(name));
    }
    std::ofstream(dir.file("tokenizer.json")) << tiny_tokenizer().dump();
    std::ifstream in(dir.file("config.json"));
    json c = json::parse(in);
    in.close();
    c.update(config_edits);
    std::ofstream(dir.file("config.json")) << c.dump();
    if (!generation.is_null()) std::ofstream(dir.file("generation_config.json")) << generation.dump();
  }
};

/// The fixture's transformers reference: its prompt and greedy continuation (8 tokens).
json reference() {
  std::ifstream in(kFixture + "/reference.json");
  return json::parse(in);
}

std::string prompt_ids() {
  const json ref = reference();
  std::string s;
  for (int id : ref["prompt_ids"]) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

const std::string kPrompt = " --prompt-ids " + prompt_ids() + " --format json --threads 1";

json output(const test::RunResult& r) {
  EXPECT_EQ(r.status, 0) << r.err;
  return r.status == 0 ? json::parse(r.out) : json::object();
}

std::vector<int32_t> ids(const json& out) { return out.value("output_ids", std::vector<int32_t>{}); }

/// The fixture's greedy continuation as one process prints it without any generation_config.json.
std::vector<int32_t> greedy(int n) {
  ModelDir plain(json::object(), nullptr);
  return ids(output(run_olmo2("generate --model " + plain.dir.path() + kPrompt + " --max-tokens " + std::to_string(n))));
}

TEST(GenerationConfigCli, WithoutTheFileGenerateIsTransformersGreedy) {
  EXPECT_EQ(greedy(8), reference()["greedy_ids"].get<std::vector<int32_t>>());
}

TEST(GenerationConfigCli, ConsistentDirectoryPrintsNoWarning) {
  ModelDir d(json::object(), {{"eos_token_id", 158}, {"pad_token_id", 159}});
  const auto r = run_olmo2("generate --model " + d.dir.path() + kPrompt + " --max-tokens 4 --strict-special-tokens");
  EXPECT_EQ(ids(output(r)), greedy(4));
  EXPECT_EQ(r.err, "");  // nothing to say: no warning, no stop ids or defaults beyond config.json
}

TEST(GenerationConfigCli, MismatchedEosIsAWarningNamingBothTokens) {
  ModelDir d({{"eos_token_id", 0}}, nullptr);
  const auto r = run_olmo2("generate --model " + d.dir.path() + kPrompt + " --max-tokens 4");
  EXPECT_EQ(ids(output(r)).size(), 4u);
  EXPECT_THAT(r.err, HasSubstr("warning: config.json eos_token_id 0 is \"!\", not a special token of the tokenizer "
                               "(its end-of-text token is <|endoftext|> (id 158))"));
  EXPECT_THAT(r.err, HasSubstr("--strict-special-tokens makes this an error"));
  // Under the strict flag: one line, exit 1, nothing generated.
  const auto strict = run_olmo2("generate --model " + d.dir.path() + kPrompt + " --max-tokens 4 --strict-special-tokens");
  EXPECT_EQ(strict.status, 1) << strict.err;
  EXPECT_EQ(strict.out, "");
  EXPECT_EQ(std::count(strict.err.begin(), strict.err.end(), '\n'), 1) << strict.err;
  EXPECT_THAT(strict.err, HasSubstr("olmo2: error: "));
  EXPECT_THAT(strict.err, HasSubstr("config.json eos_token_id 0 is \"!\""));
  EXPECT_THAT(strict.err, HasSubstr("(--strict-special-tokens)"));
}

TEST(GenerationConfigCli, SwappedEosAndPadAreBothNamed) {
  ModelDir d({{"eos_token_id", 159}, {"pad_token_id", 158}}, nullptr);
  const auto r = run_olmo2("generate --model " + d.dir.path() + kPrompt + " --max-tokens 2");
  output(r);
  EXPECT_THAT(r.err, HasSubstr("config.json eos_token_id 159 is <|pad|>, not the tokenizer's end-of-text token "
                               "<|endoftext|> (id 158)"));
  EXPECT_THAT(r.err, HasSubstr("config.json pad_token_id 158 is <|endoftext|>, not the tokenizer's padding token "
                               "<|pad|> (id 159)"));
}

TEST(GenerationConfigCli, ItsEosIdsStopGenerationUnlessIgnored) {
  const std::vector<int32_t> g = greedy(8);
  // The third greedy token becomes an end-of-turn id of generation_config.json (beside
  // EOS); it is not an added token of the tokenizer, so it is also named in a warning.
  ModelDir d(json::object(), {{"eos_token_id", {158, g[2]}}});
  const auto r = run_olmo2("generate --model " + d.dir.path() + kPrompt + " --max-tokens 8");
  const json out = output(r);
  EXPECT_EQ(ids(out), std::vector<int32_t>(g.begin(), g.begin() + 3));
  EXPECT_EQ(out["finish_reason"], "stop");
  EXPECT_THAT(r.err, HasSubstr("stop ids 158, " + std::to_string(g[2]) + " (config.json, generation_config.json)"));
  EXPECT_THAT(r.err, HasSubstr("generation_config.json eos_token_id " + std::to_string(g[2]) + " is "));
  const auto ignored = run_olmo2("generate --model " + d.dir.path() + kPrompt + " --max-tokens 8 --generation-config ignore");
  const json all = output(ignored);
  EXPECT_EQ(ids(all), g);
  EXPECT_EQ(all["finish_reason"], "length");
  EXPECT_THAT(ignored.err, Not(HasSubstr("warning")));  // the file is not read at all
  // A non-special added token is a valid end-of-turn id: no warning for it.
  ModelDir note(json::object(), {{"eos_token_id", {158, 157}}});
  EXPECT_THAT(run_olmo2("generate --model " + note.dir.path() + kPrompt + " --max-tokens 2").err, Not(HasSubstr("warning")));
}

TEST(GenerationConfigCli, ItsValuesAreDefaultsTheCommandLineOverrides) {
  const std::string tail = kPrompt + " --seed 4";
  // max_new_tokens is --max-tokens' default.
  ModelDir max3(json::object(), {{"max_new_tokens", 3}});
  EXPECT_EQ(ids(output(run_olmo2("generate --model " + max3.dir.path() + tail))), greedy(3));
  EXPECT_EQ(ids(output(run_olmo2("generate --model " + max3.dir.path() + tail + " --max-tokens 5"))), greedy(5));
  // Sampling values apply with do_sample true, as transformers' generate() takes them.
  ModelDir plain(json::object(), nullptr);
  const auto explicit_sampled = ids(output(run_olmo2("generate --model " + plain.dir.path() + tail +
                                                     " --max-tokens 8 --temperature 1.5 --top-k 50 --top-p 0.95")));
  ModelDir sampled(json::object(), {{"do_sample", true}, {"temperature", 1.5}, {"top_k", 50}, {"top_p", 0.95}});
  const auto r = run_olmo2("generate --model " + sampled.dir.path() + tail + " --max-tokens 8");
  EXPECT_EQ(ids(output(r)), explicit_sampled);
  EXPECT_THAT(r.err, HasSubstr("defaults from generation_config.json: temperature 1.5, top_p 0.95, top_k 50, do_sample true\n"));
  EXPECT_NE(explicit_sampled, greedy(8));  // the defaults did change the tokens
  // … and the command line wins.
  EXPECT_EQ(ids(output(run_olmo2("generate --model " + sampled.dir.path() + tail + " --max-tokens 8 --temperature 0"))),
            greedy(8));
  // Without do_sample they are unused: greedy.
  ModelDir unsampled(json::object(), {{"temperature", 1.5}, {"top_k", 50}});
  const auto u = run_olmo2("generate --model " + unsampled.dir.path() + tail + " --max-tokens 8");
  EXPECT_EQ(ids(output(u)), greedy(8));
  EXPECT_THAT(u.err, HasSubstr("(temperature, top_k, top_p and min_p unused: do_sample is not true)"));
  // The repetition penalty applies also to greedy decoding; --repetition-penalty 1 undoes it.
  const auto penalised = ids(output(run_olmo2("generate --model " + plain.dir.path() + tail +
                                              " --max-tokens 8 --repetition-penalty 1.8")));
  ModelDir rep(json::object(), {{"repetition_penalty", 1.8}});
  EXPECT_EQ(ids(output(run_olmo2("generate --model " + rep.dir.path() + tail + " --max-tokens 8"))), penalised);
  EXPECT_EQ(ids(output(run_olmo2("generate --model " + rep.dir.path() + tail + " --max-tokens 8 --repetition-penalty 1"))),
            greedy(8));
}

TEST(GenerationConfigCli, BadFilesAndValuesAreOneLineErrors) {
  ModelDir cold(json::object(), {{"temperature", -1}});
  auto r = run_olmo2("generate --model " + cold.dir.path() + kPrompt);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("generation_config.json: temperature must be a finite number ≥ 0"));
  ModelDir outside(json::object(), {{"eos_token_id", {158, 160}}});
  r = run_olmo2("generate --model " + outside.dir.path() + kPrompt);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("generation_config.json: field \"eos_token_id\" is 160, outside the vocabulary [0, 160)"));
  ModelDir typed(json::object(), {{"max_new_tokens", "many"}});
  r = run_olmo2("generate --model " + typed.dir.path() + kPrompt);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("field \"max_new_tokens\" must be an integer, got \"many\""));
  r = run_olmo2("generate --model " + typed.dir.path() + kPrompt + " --generation-config never");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--generation-config must be auto or ignore, got \"never\""));
  r = run_olmo2("generate --model " + typed.dir.path() + kPrompt + " --repetition-penalty 0");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("repetition_penalty"));
  std::ofstream(typed.dir.file("generation_config.json")) << "{\"eos_token_id\": [158,";  // cut short
  r = run_olmo2("generate --model " + typed.dir.path() + kPrompt);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("generation_config.json is not valid JSON: "));
  // The strict flag with no tokenizer to check against.
  ModelDir bare(json::object(), nullptr);
  std::filesystem::remove(bare.dir.file("tokenizer.json"));
  r = run_olmo2("generate --model " + bare.dir.path() + kPrompt + " --strict-special-tokens");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--strict-special-tokens: no tokenizer to check the special ids against"));
  EXPECT_EQ(run_olmo2("generate --model " + bare.dir.path() + kPrompt).status, 0);  // today's behaviour
  // A tokenizer that cannot be read leaves the ids unchecked (--prompt-ids needs none), an
  // error only under the strict flag.
  std::ofstream(bare.dir.file("tokenizer.json")) << "{";
  r = run_olmo2("generate --model " + bare.dir.path() + kPrompt + " --max-tokens 2");
  EXPECT_EQ(ids(output(r)).size(), 2u);
  EXPECT_THAT(r.err, HasSubstr("warning: the special ids are not checked: "));
  EXPECT_EQ(run_olmo2("generate --model " + bare.dir.path() + kPrompt + " --strict-special-tokens").status, 1);
}

TEST(GenerationConfigCli, ThousandsOfStrayIdsSayFewLines) {
  json many = json::array();
  for (int id = 0; id < 150; ++id) many.push_back(id);
  ModelDir d(json::object(), {{"eos_token_id", many}});
  const auto r = run_olmo2("generate --model " + d.dir.path() + kPrompt + " --max-tokens 1");
  output(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 8 + 1 + 1 + 1) << r.err;  // 8 named, the count, the hint, the stop ids
  EXPECT_THAT(r.err, HasSubstr("warning: … and 142 more mismatches of the same files"));
  EXPECT_THAT(r.err, HasSubstr("stop ids 158, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, … (151 in all)"));
}

}  // namespace
}  // namespace olmo2
