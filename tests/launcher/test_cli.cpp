// The olmo2 binary as a user runs it: outputs, exit codes and one-line errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "launcher/options.h"
#include "ops/quantized_linear.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using test::run_olmo2;

const std::string kFixtures = test::source_path("tests/golden/fixtures");

json reference(const std::string& model) {
  std::ifstream in(kFixtures + "/" + model + "/reference.json");
  return json::parse(in);
}

std::string ids_arg(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(ids[i]));
  }
  return s;
}

/// A failed run: non-zero status and exactly one line on stderr containing `what`.
void expect_one_line_error(const test::RunResult& r, int status, const std::string& what) {
  EXPECT_EQ(r.status, status) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(what));
  EXPECT_EQ(r.err.rfind("olmo2: error: ", 0), 0u) << r.err;
}

TEST(CliInfo, PrintsParameterCountsFromConfigAlone) {
  auto r = run_olmo2("info --model " + kFixtures + "/configs/OLMo-2-0425-1B");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("parameters              1484916736\n"));
  EXPECT_THAT(r.out, HasSubstr("head_dim                128\n"));
  r = run_olmo2("info --model " + kFixtures + "/configs/OLMo-2-0325-32B");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("parameters              32234279936\n"));
  EXPECT_THAT(r.out, HasSubstr("num_key_value_heads     8\n"));
}

TEST(CliGenerate, JsonOutputMatchesTransformersGreedy) {
  const json ref = reference("mha-f32");
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto r = run_olmo2("generate --model " + kFixtures + "/mha-f32 --prompt-ids " + ids_arg(prompt) +
                           " --max-tokens 8 --format json --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["prompt_ids"], ref["prompt_ids"]);
  EXPECT_EQ(out["output_ids"], ref["greedy_ids"]);
  EXPECT_EQ(out["finish_reason"], "length");
}

TEST(CliGenerate, PrecisionDefaultsToTheCheckpointsAndCanBeChosen) {
  // A bf16 checkpoint serves in bf16 by default and follows transformers' bf16 greedy
  // continuation; --precision fp32 widens it, --precision bf16 narrows an f32 one.
  const json ref = reference("gqa-bf16");
  const std::string args = " --prompt-ids " + ids_arg(ref["prompt_ids"].get<std::vector<int32_t>>()) +
                           " --max-tokens 8 --format json --threads 1";
  auto r = run_olmo2("generate --model " + kFixtures + "/gqa-bf16" + args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["output_ids"], ref["greedy_ids"]);
  // The KV cache in f32 under bf16 (--kv-cache-dtype; auto is bf16 there): the same tokens.
  r = run_olmo2("generate --model " + kFixtures + "/gqa-bf16" + args + " --kv-cache-dtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["output_ids"], ref["greedy_ids"]);
  r = run_olmo2("generate --model " + kFixtures + "/gqa-bf16" + args + " --precision fp32");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["output_ids"].size(), 8u);
  r = run_olmo2("generate --model " + kFixtures + "/gqa-bf16" + args + " --precision fp32 --kv-cache-dtype bf16");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["output_ids"].size(), 8u);
  r = run_olmo2("generate --model " + kFixtures + "/mha-f32 --prompt-ids 1,2,3 --max-tokens 4 --format json"
                " --precision bf16");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["output_ids"].size(), 4u);
}

TEST(CliGenerate, StopsAtEosWithFinishReasonStop) {
  const json ref = reference("mha-f32");
  const auto greedy = ref["greedy_ids"].get<std::vector<int32_t>>();
  const int k = ref["stop_eos_index"].get<int>();
  test::TempDir dir;
  for (const auto& f : std::filesystem::directory_iterator(kFixtures + "/mha-f32")) {
    std::filesystem::copy_file(f.path(), dir.file(f.path().filename().string()));
  }
  std::ifstream in(dir.file("config.json"));
  json cfg = json::parse(in);
  in.close();
  cfg["eos_token_id"] = greedy[k];  // the model's (k+1)-th greedy token becomes eos
  std::ofstream(dir.file("config.json")) << cfg.dump();
  const auto r = run_olmo2("generate --model " + dir.path() + " --prompt-ids " +
                           ids_arg(ref["prompt_ids"].get<std::vector<int32_t>>()) +
                           " --max-tokens 8 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["output_ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(greedy.begin(), greedy.begin() + k + 1));
  EXPECT_EQ(out["finish_reason"], "stop");
}

// An Olmo 3 model directory with the dolma2 tokenizer (tests/golden/make_olmo3_fixtures.py,
// olmo3-tok-f32, plus data/dolma2-tokenizer.json as its tokenizer.json): `--prompt TEXT`
// is tokenized from the model directory as the `tokenizers` library tokenizes it, and the
// continuation (past original_max_position_embeddings 16, the window of 4 sliding) is
// transformers' greedy one, ids and decoded text.
TEST(CliGenerate, Olmo3TextPromptWithTheTokenizerOfTheModelDirectory) {
  const std::string fixture = kFixtures + "/olmo3-tok-f32";
  std::string tok = test::source_path("data/dolma2-tokenizer.json");
  if (!std::filesystem::exists(tok)) tok = test::source_path("../shared/data/dolma2-tokenizer.json");
  test::TempDir dir;
  for (const auto& f : std::filesystem::directory_iterator(fixture)) {
    std::filesystem::copy_file(f.path(), dir.file(f.path().filename().string()));
  }
  std::filesystem::copy_file(tok, dir.file("tokenizer.json"));
  const json ref = reference("olmo3-tok-f32");
  const auto greedy = ref["greedy_ids"].get<std::vector<int32_t>>();
  const auto r = run_olmo2("generate --model " + dir.path() + " --prompt '" + ref["prompt"].get<std::string>() +
                           "' --max-tokens " + std::to_string(greedy.size()) + " --format json --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["prompt_ids"], ref["prompt_ids"]);
  EXPECT_EQ(out["output_ids"].get<std::vector<int32_t>>(), greedy);
  EXPECT_EQ(out["text"], ref["greedy_text"]);
  EXPECT_EQ(out["finish_reason"], "length");
}

TEST(CliGenerate, TextFormatAndIniConfigWhereTheCommandLineWins) {
  test::TempDir dir;
  std::ofstream(dir.file("run.ini")) << "model = " << kFixtures << "/mha-f32\nmax-tokens = 2\nprompt-ids = 1,2\n";
  auto r = run_olmo2("generate --config " + dir.file("run.ini"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("finish_reason: length"));
  const std::string two_line = r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), ','), 1);  // two output ids
  r = run_olmo2("generate --config " + dir.file("run.ini") + " --max-tokens 3");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), ','), 2);  // three output ids
}

TEST(CliErrors, BadCommandLinesExitTwoWithOneLine) {
  const std::string m = " --model " + kFixtures + "/mha-f32";
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --bogus"), 2, "unrecognised option '--bogus'");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --max-tokens"), 2, "max-tokens");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --max-tokens abc"), 2, "max-tokens");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --max-tokens -3"), 2, "--max-tokens must be at least 1, got -3");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1,x,3"), 2, "\"x\" is not a token id");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1,,3"), 2, "\"\" is not a token id");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 99999999999"), 2, "\"99999999999\" is not a token id");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --threads 0"), 2, "--threads must be at least 1");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --format xml"), 2, "--format must be text or json");
  expect_one_line_error(run_olmo2("generate" + m), 2, "give exactly one of --prompt TEXT and --prompt-ids");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --precision fp16"), 2,
                        "--precision must be fp32 or bf16, got \"fp16\"");
  expect_one_line_error(run_olmo2("serve" + m + " --precision BF16"), 2, "--precision must be fp32 or bf16, got \"BF16\"");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --kv-cache-dtype f16"), 2,
                        "--kv-cache-dtype must be auto, bf16 or f32, got \"f16\"");
  expect_one_line_error(run_olmo2("serve" + m + " --kv-cache-dtype F32"), 2,
                        "--kv-cache-dtype must be auto, bf16 or f32, got \"F32\"");
  expect_one_line_error(run_olmo2("info"), 2, "--model DIR is required");
  expect_one_line_error(run_olmo2("serv" + m), 2, "unknown subcommand \"serv\" (expected info, plan, generate, trace, train, serve or tokenize)");
  expect_one_line_error(run_olmo2("serve"), 2, "serve: --model DIR is required");
  expect_one_line_error(run_olmo2("serve" + m + " --port 70000"), 2, "--port must be in 1…65535 (or 0: any free one), got 70000");
  expect_one_line_error(run_olmo2("serve" + m + " --port -1"), 2, "--port must be in 1…65535 (or 0: any free one), got -1");
  expect_one_line_error(run_olmo2("serve" + m + " --port-file ''"), 2, "--port-file must not be empty");
  expect_one_line_error(run_olmo2("serve" + m + " --kv-cache-memory 12XB"), 2, "--kv-cache-memory: unknown unit 'XB'");
  expect_one_line_error(run_olmo2("serve" + m + " --max-activation-bytes 12XB"), 2,
                        "--max-activation-bytes: unknown unit 'XB'");
  expect_one_line_error(run_olmo2("serve" + m + " --max-activation-bytes 0"), 2,
                        "--max-activation-bytes must be a positive size, got '0'");
  expect_one_line_error(run_olmo2("serve" + m + " --max-activation-bytes 1e30"), 2,
                        "--max-activation-bytes: '1e30' has an exponent");
  expect_one_line_error(run_olmo2("serve" + m + " --max-batch-tokens 8"), 2,
                        "--max-batch-tokens 8 is below --max-running-requests 64");
  expect_one_line_error(run_olmo2("serve" + m + " --dp 2"), 2, "serve: --dp is not supported");
  expect_one_line_error(run_olmo2("serve" + m + " --block-size 36028797018963968"), 2,
                        "--block-size must be at most 4096 positions");
  expect_one_line_error(run_olmo2("serve" + m + " --max-waiting-requests 4294967000"), 2,
                        "--max-waiting-requests must be in 0…1000000");
  expect_one_line_error(run_olmo2("serve" + m + " --enable-prefix-caching=true --no-prefix-caching"), 2,
                        "--enable-prefix-caching=true and --no-prefix-caching contradict each other");
  expect_one_line_error(run_olmo2("serve" + m + " --enable-prefix-caching=maybe"), 2, "enable-prefix-caching");
  expect_one_line_error(run_olmo2("serve" + m), 1, "no tokenizer: " + kFixtures + "/mha-f32/tokenizer.json is missing");
  expect_one_line_error(run_olmo2("train" + m), 2, "train: --seq-len is required");
  EXPECT_EQ(run_olmo2("").status, 2);
  EXPECT_EQ(run_olmo2("generate --help").status, 0);
}

// Speculative decoding's refusals (docs/architecture.md §8): each one line naming the
// option and the value, exit 2 before any work; a draft of another vocabulary is the
// start's input error (exit 1) naming both sizes.
TEST(CliErrors, SpeculativeDecodingRefusalsNameTheValue) {
  const std::string model = kFixtures + "/mha-f32";
  const std::string m = " --model " + model;
  test::TempDir dir;
  const std::vector<std::pair<std::string, std::string>> usage_errors = {
      {"--speculative-ngram 2 --num-speculative-tokens 0", "--num-speculative-tokens must be in 1…16, got 0"},
      {"--speculative-ngram 2 --num-speculative-tokens 17", "--num-speculative-tokens must be in 1…16, got 17"},
      {"--num-speculative-tokens 4", "--num-speculative-tokens 4 needs --speculative-model or --speculative-ngram"},
      {"--speculative-model " + model + " --speculative-ngram 2",
       "--speculative-model and --speculative-ngram: choose one way of proposing tokens"},
      {"--speculative-ngram 0", "--speculative-ngram must be in 1…64 tokens, got 0"},
      {"--speculative-model " + dir.path(),
       "--speculative-model: \"" + dir.path() + "\" is not a model directory (no config.json)"},
      {"--speculative-ngram 2 --max-running-requests 2 --max-batch-tokens 4",
       "--num-speculative-tokens 4 needs --max-batch-tokens of at least 5"},
      {"--speculative-ngram 3 --num-speculative-tokens 8 --max-running-requests 2 --max-batch-tokens 8",
       "--num-speculative-tokens 8 needs --max-batch-tokens of at least 9"},
  };
  for (const auto& [options, message] : usage_errors) {
    SCOPED_TRACE(options);
    expect_one_line_error(run_olmo2("serve" + m + " " + options), 2, message);
  }
  // A draft whose config.json has another vocabulary (161 tokens against the model's 160).
  std::ifstream in(model + "/config.json");
  json cfg = json::parse(in);
  ASSERT_EQ(cfg["vocab_size"], 160);
  cfg["vocab_size"] = 161;
  std::ofstream(dir.file("config.json")) << cfg.dump();
  expect_one_line_error(run_olmo2("serve" + m + " --speculative-model " + dir.path()), 1,
                        "--speculative-model " + dir.path() + " has a vocabulary of 161 tokens, the model 160");
}

// --weights and --weight-group (docs/architecture.md §3.2 "Quantized weights").
TEST(CliErrors, QuantizedWeightRefusalsNameTheValue) {
  const std::string m = " --model " + kFixtures + "/mha-f32";
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --weights int3"), 2,
                        "--weights must be auto, int8 or int4, got \"int3\"");
  expect_one_line_error(run_olmo2("serve" + m + " --weights q8_0"), 2, "--weights must be auto, int8 or int4, got \"q8_0\"");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --weights int8 --weight-group 48"), 2,
                        "--weight-group 48 for --weights int8: int8 takes a positive multiple of 32");
  expect_one_line_error(run_olmo2("trace" + m + " --prompts x --activations y --weights int4 --weight-group 128"), 2,
                        "--weight-group 128 for --weights int4: int4 takes 32 or 64");
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --weight-group 32"), 2,
                        "--weight-group needs --weights int8 or int4");
  // The GPU path refuses them up front, whether or not this machine has a GPU.
  expect_one_line_error(run_olmo2("serve" + m + " --device cuda --weights int4"), 2,
                        "quantized weights run on the CPU only; the GPU path does not have them yet");
  expect_one_line_error(run_olmo2("train --weights int8"), 2, "unrecognised option '--weights'");
  // A group the model's hidden size (64) does not divide: found when the model is read.
  expect_one_line_error(run_olmo2("generate" + m + " --prompt-ids 1 --weights int8 --weight-group 128"), 1,
                        "--weights int8: weight group 128 does not divide the K of q_proj, k_proj, v_proj, "
                        "gate_proj and up_proj: 64 (the model's)");
}

TEST(CliGenerate, QuantizedWeightsNameTheirFormatAndPath) {
  for (const char* f : {"int8", "int4"}) {
    const auto r = run_olmo2("generate --model " + kFixtures + "/gqa-f32 --prompt-ids 5,17,3 --max-tokens 4 --format json --weights " + f);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["output_ids"].size(), 4u);
    EXPECT_THAT(r.err, HasSubstr(std::string("weights: ") + f + " (groups of "));
    EXPECT_THAT(r.err, HasSubstr(std::string("; quantized products ") + ops::quantized_path_name(ops::quantized_path())));
  }
}

TEST(CliErrors, ABadProductPathOverrideIsOneLineBeforeAnyWork) {
  const std::string m = " --model " + kFixtures + "/mha-f32 --prompt-ids 1";
  for (const std::string& env : {std::string("OLMO2_BF16_GEMM=foo"), std::string("OLMO2_BATCH_INVARIANT_GEMM=foo")}) {
    const auto r = test::run_olmo2_with(env + " " + OLMO2_BINARY, "generate" + m);
    EXPECT_EQ(r.status, 1) << env;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_THAT(r.err, ::testing::StartsWith("olmo2: error: " + env + ": expected ")) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(CliErrors, BadModelsExitOneWithOneLine) {
  expect_one_line_error(run_olmo2("info --model /nonexistent/dir"), 1, "cannot open /nonexistent/dir/config.json");
  test::TempDir dir;
  std::filesystem::copy_file(kFixtures + "/mha-f32/config.json", dir.file("config.json"));
  std::ofstream(dir.file("model.safetensors")) << "abc";
  expect_one_line_error(run_olmo2("generate --model " + dir.path() + " --prompt-ids 1"), 1,
                        "truncated: 3 bytes, shorter than the 8-byte header length");
  std::ifstream in(dir.file("config.json"));
  json cfg = json::parse(in);
  in.close();
  cfg["architectures"] = {"LlamaForCausalLM"};
  std::ofstream(dir.file("config.json")) << cfg.dump();
  expect_one_line_error(run_olmo2("info --model " + dir.path()), 1, "architecture \"LlamaForCausalLM\" is not supported");
  expect_one_line_error(run_olmo2("generate --model " + kFixtures + "/mha-f32 --prompt-ids 1,500"), 1,
                        "the prompt: token id 500 at position 1 is outside the vocabulary [0, 160)");
}

TEST(CliServe, HelpListsOnlyTheOptionsServeAccepts) {
  const auto r = run_olmo2("serve --help");
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* listed : {"--tokenizer", "--chat-template", "--api-key", "OLMO2_API_KEY", "--tp", "--pp-layers",
                             "--max-activation-bytes", "--tool-call-parser"}) {
    EXPECT_THAT(r.out, HasSubstr(listed));
  }
  // --dp is parsed only to be refused with a reason; info's wording is not serve's.
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("--dp")));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("info:")));
  EXPECT_THAT(run_olmo2("generate --help").out, HasSubstr("--dp"));
}

TEST(CliServe, TokenizerChatTemplateAndApiKeyFromTheEnvironment) {
  const std::string m = " --model " + kFixtures + "/mha-f32";
  expect_one_line_error(run_olmo2("serve" + m + " --chat-template /nonexistent/t.jinja"), 2,
                        "--chat-template: cannot read \"/nonexistent/t.jinja\" (not a readable file)");
  expect_one_line_error(run_olmo2("serve" + m + " --tool-call-parser llama3_json"), 2,
                        "--tool-call-parser: unknown tool-call parser 'llama3_json' (olmo3, hermes or none)");
  expect_one_line_error(run_olmo2("serve" + m + " --tokenizer /nonexistent/tokenizer.json"), 2,
                        "--tokenizer: cannot read \"/nonexistent/tokenizer.json\"");
  test::TempDir dir;
  std::ofstream(dir.file("empty.jinja")).close();
  expect_one_line_error(run_olmo2("serve" + m + " --chat-template " + dir.file("empty.jinja")), 2,
                        "--chat-template: " + dir.file("empty.jinja") + " is empty");
  expect_one_line_error(test::run_olmo2_with(std::string("OLMO2_API_KEY= ") + OLMO2_BINARY, "serve" + m), 2,
                        "OLMO2_API_KEY is set but empty");
  // A template the interpreter cannot run stops serve before the model loads.
  std::ofstream(dir.file("bad.jinja")) << "{% for m in messages %}{{ m | frobnicate }}{% endfor %}";
  expect_one_line_error(run_olmo2("serve" + m + " --chat-template " + dir.file("bad.jinja")), 2,
                        "--chat-template " + dir.file("bad.jinja") + ": ");
  // In process: the key from the command line wins over the environment's.
  std::ofstream(dir.file("chat.jinja")) << "{{ messages }}";
  const std::string model = kFixtures + "/mha-f32", tpl = dir.file("chat.jinja");
  const auto parse = [&](std::vector<const char*> extra) {
    std::vector<const char*> argv = {"olmo2", "serve", "--model", model.c_str()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return parse_command_line(static_cast<int>(argv.size()), argv.data()).serve;
  };
  ::unsetenv("OLMO2_API_KEY");
  EXPECT_EQ(parse({}).api_key, "");
  EXPECT_EQ(parse({"--api-key", "line"}).api_key, "line");
  ::setenv("OLMO2_API_KEY", "from-env", 1);
  EXPECT_EQ(parse({}).api_key, "from-env");
  EXPECT_EQ(parse({"--api-key", "line"}).api_key, "line");
  ::unsetenv("OLMO2_API_KEY");
  const ServeOptions o = parse({"--chat-template", tpl.c_str(), "--tokenizer", tpl.c_str()});
  EXPECT_EQ(o.chat_template, "{{ messages }}");
  EXPECT_EQ(o.chat_template_file, tpl);
  EXPECT_EQ(o.tokenizer, tpl);
  EXPECT_EQ(parse({}).tokenizer, "");
}

TEST(CliServe, MaxActivationBytesTakesAMemorySize) {
  const std::string model = kFixtures + "/mha-f32";
  const auto parse = [&](std::vector<const char*> extra) {
    std::vector<const char*> argv = {"olmo2", "serve", "--model", model.c_str()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return parse_command_line(static_cast<int>(argv.size()), argv.data()).serve.max_activation_bytes;
  };
  EXPECT_EQ(parse({}), int64_t{64} << 20);
  EXPECT_EQ(parse({"--max-activation-bytes", "16MiB"}), int64_t{16} << 20);
  EXPECT_EQ(parse({"--max-activation-bytes", "1.5G"}), 1500000000);
  EXPECT_EQ(parse({"--max-activation-bytes", "4096"}), 4096);
}

TEST(Options, ParseIdList) {
  EXPECT_EQ(parse_id_list("0,17,100257", "x"), (std::vector<int32_t>{0, 17, 100257}));
  EXPECT_THROW(parse_id_list("1, 2", "x"), UsageError);
  EXPECT_THROW(parse_id_list("-1", "x"), UsageError);
  EXPECT_THROW(parse_id_list("1,", "x"), UsageError);
}

}  // namespace
}  // namespace olmo2
