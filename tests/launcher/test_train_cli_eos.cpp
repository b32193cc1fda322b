// `olmo2 train` checks its model's end-of-text token against the tokenizer and the token
// data before any work, and its checkpoints keep the generation_config.json of the model
// they continue (docs/architecture.md §7 "Token data and its EOS", "Checkpoints"). A thin
// model as wide as the dolma2 vocabulary keeps each run well under a second.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "runtime/io/npy.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string tokenizer_path() {
  const std::string fetched = test::source_path("data/dolma2-tokenizer.json");
  return fs::exists(fetched) ? fetched : test::source_path("../shared/data/dolma2-tokenizer.json");
}

/// A one-layer OLMo 2 of width 8 over the dolma2 vocabulary (100352 rows) whose
/// config.json says eos `eos` (an id or a list), and 512 random token ids in
/// data/tokens.npy, documents ended by 100257.
struct WideSetup {
  test::TempDir dir;
  explicit WideSetup(const json& eos) {
    write_config("config.json", eos);
    fs::create_directory(dir.file("data"));
    std::mt19937 rng(5);
    std::vector<uint32_t> ids(512);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 64 == 63 ? 100257u : static_cast<uint32_t>(rng() % 100000);
    NpyWriter w(dir.file("data/tokens.npy"));
    w.append(ids);
    w.close();
  }
  void write_config(const std::string& name, const json& eos) const {
    const json c = {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 100352},
                    {"hidden_size", 8}, {"intermediate_size", 8}, {"num_hidden_layers", 1},
                    {"num_attention_heads", 2}, {"num_key_value_heads", 2}, {"max_position_embeddings", 64},
                    {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
                    {"eos_token_id", eos}, {"pad_token_id", 100277}};
    std::ofstream(dir.file(name)) << c.dump(1);
  }
  std::string train(const std::string& model, const std::string& save, int steps = 1) const {
    return "train " + model + " --data " + dir.file("data/tokens.npy") + " --seq-len 16 --global-batch 2 --steps " +
           std::to_string(steps) + " --threads 2 --save-dir " + save;
  }
  std::string from_scratch(const std::string& save) const {
    return train("--model-config " + dir.file("config.json"), save);
  }
};

TEST(TrainCliEos, AConfigEosThatIsNotTheTokenizersIsRefusedUnlessAllowed) {
  const WideSetup s(0);  // 0 is "!" in dolma2
  const std::string run = s.dir.file("run");
  const test::RunResult r = test::run_olmo2(s.from_scratch(run) + " --tokenizer " + tokenizer_path());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "olmo2: error: " + s.dir.file("config.json") +
                       " eos_token_id 0 is \"!\", not a special token of the tokenizer (its end-of-text token is "
                       "<|endoftext|> (id 100257)) (tokenizer " + tokenizer_path() +
                       "): documents would be separated by another token than the model stops on; give "
                       "--allow-eos-mismatch to train anyway\n");
  EXPECT_FALSE(fs::exists(run)) << "refused before any work";
  const test::RunResult ok =
      test::run_olmo2(s.from_scratch(run) + " --tokenizer " + tokenizer_path() + " --allow-eos-mismatch");
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_THAT(ok.err, HasSubstr("warning: " + s.dir.file("config.json") + " eos_token_id 0 is \"!\""));
  EXPECT_THAT(ok.err, HasSubstr("training anyway (--allow-eos-mismatch)\n"));
  EXPECT_TRUE(fs::exists(run + "/step-00000001/config.json"));
  // Without a tokenizer there is nothing to check the config against.
  ASSERT_EQ(test::run_olmo2(s.from_scratch(s.dir.file("bare"))).status, 0);
}

TEST(TrainCliEos, TheTokenizersEosAmongOthersIsAccepted) {
  const WideSetup s(json::array({100257, 100265}));
  const test::RunResult r = test::run_olmo2(s.from_scratch(s.dir.file("run")) + " --tokenizer " + tokenizer_path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("warning")));
  // An end-of-turn token alone is not the tokenizer's EOS.
  s.write_config("config.json", 100265);
  const test::RunResult chat = test::run_olmo2(s.from_scratch(s.dir.file("chat")) + " --tokenizer " + tokenizer_path());
  EXPECT_EQ(chat.status, 1);
  EXPECT_THAT(chat.err, HasSubstr("eos_token_id 100265 is <|im_end|>, not the tokenizer's end-of-text token "
                                  "<|endoftext|> (id 100257)"));
}

TEST(TrainCliEos, DataWhoseTokenizeJsonSaysAnotherEosIsRefused) {
  const WideSetup s(100257);
  std::ofstream(s.dir.file("data/tokenize.json")) << R"({"eos_id": 100265, "eos_token": "<|im_end|>"})";
  const test::RunResult r = test::run_olmo2(s.from_scratch(s.dir.file("run")));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "olmo2: error: --data " + s.dir.file("data/tokens.npy") + ": " + s.dir.file("data/tokenize.json") +
                       " says its documents end with <|im_end|> (id 100265), which " + s.dir.file("config.json") +
                       " eos_token_id [100257] does not include: documents would be separated by another token than "
                       "the model stops on; give --allow-eos-mismatch to train anyway\n");
  const test::RunResult ok = test::run_olmo2(s.from_scratch(s.dir.file("run")) + " --allow-eos-mismatch");
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_THAT(ok.err, HasSubstr("warning: --data "));
  // The data's EOS in the config's list: accepted.
  std::ofstream(s.dir.file("data/tokenize.json")) << R"({"eos_id": 100257, "eos_token": "<|endoftext|>"})";
  ASSERT_EQ(test::run_olmo2(s.from_scratch(s.dir.file("run2"))).status, 0);
}

// Token data `olmo2 tokenize` made with this run's tokenizer file trains without a word;
// made with another file (its SHA-256 differs), the run says so and goes on.
TEST(TrainCliEos, DataMadeWithAnotherTokenizerFileIsNoted) {
  const WideSetup s(100257);
  std::ofstream(s.dir.file("a.txt")) << "Some text.";
  ASSERT_EQ(test::run_olmo2("tokenize --tokenizer " + tokenizer_path() + " --output " + s.dir.file("data") + " " +
                            s.dir.file("a.txt")).status, 0);
  const test::RunResult same = test::run_olmo2(s.from_scratch(s.dir.file("run")) + " --tokenizer " + tokenizer_path());
  ASSERT_EQ(same.status, 0) << same.err;
  EXPECT_THAT(same.err, Not(HasSubstr("note: the token files")));
  std::ofstream(s.dir.file("data/tokenize.json"))
      << R"({"eos_id": 100257, "eos_token": "<|endoftext|>", "tokenizer": "old/tokenizer.json",
            "tokenizer_sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"})";
  const test::RunResult other = test::run_olmo2(s.from_scratch(s.dir.file("run2")) + " --tokenizer " + tokenizer_path());
  ASSERT_EQ(other.status, 0) << other.err;
  EXPECT_THAT(other.err, HasSubstr("note: the token files in " + s.dir.file("data") +
                                   " were made with the tokenizer old/tokenizer.json (sha256 0123456789ab…), not this "
                                   "run's " + tokenizer_path() + " (sha256 "));
}

// A run from a model directory with a generation_config.json (an instruct model's
// end-of-turn stop id and sampling values) keeps them in its checkpoints, also when it
// resumes from one of them.
TEST(TrainCliEos, CheckpointsKeepTheModelsGenerationConfig) {
  const WideSetup s(100257);
  ASSERT_EQ(test::run_olmo2(s.from_scratch(s.dir.file("base"))).status, 0);
  const std::string model = s.dir.file("instruct");
  fs::create_directory(model);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(s.dir.file("base/step-00000001/") + f, model + "/" + f);
  }
  std::ofstream(model + "/generation_config.json") << R"({"_from_model_config": false, "bos_token_id": 100257,
      "eos_token_id": [100265, 100257], "pad_token_id": 100277, "do_sample": true, "temperature": 0.6,
      "top_p": 0.9, "top_k": null, "max_new_tokens": 256, "num_beams": 1, "transformers_version": "4.48.0"})";
  const std::string run = s.dir.file("tuned");
  const test::RunResult r = test::run_olmo2(s.train("--model " + model, run));
  ASSERT_EQ(r.status, 0) << r.err;
  const json expected = {{"_from_model_config", true}, {"eos_token_id", {100257, 100265}},
                         {"pad_token_id", 100277}, {"do_sample", true}, {"temperature", 0.6},
                         {"top_p", 0.9}, {"max_new_tokens", 256}};
  EXPECT_EQ(json::parse(slurp(run + "/step-00000001/generation_config.json")), expected);
  const test::RunResult resumed =
      test::run_olmo2(s.train("--model " + model, run, 2) + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(json::parse(slurp(run + "/step-00000002/generation_config.json")), expected);
  // A generation_config.json whose kept value has the wrong type is refused naming it.
  std::ofstream(model + "/generation_config.json") << R"({"eos_token_id": 100257, "temperature": "hot"})";
  const test::RunResult bad = test::run_olmo2(s.train("--model " + model, s.dir.file("bad")));
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, AllOf(HasSubstr(model + "/generation_config.json"),
                             HasSubstr("field \"temperature\" must be a number, got \"hot\"")));
}

}  // namespace
}  // namespace olmo2
