// `olmo2 generate` under mpirun in several layouts prints what one process prints
// (transformers' greedy continuation); layout errors are one line and exit non-zero.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;

/// Runs `mpirun -np N olmo2 ARGS` (oversubscribed, as root allowed).
test::RunResult mpirun(int np, const std::string& args) {
  return test::run_olmo2_with(std::string(OLMO2_MPIEXEC) + " -np " + std::to_string(np) +
                                  " --oversubscribe --allow-run-as-root " + OLMO2_BINARY,
                              args);
}

// The Olmo 3 fixtures (sliding-window and YaRN layers, docs/architecture.md §3): 20-token
// prompts, longer than their windows and their YaRN original context, so every layout
// runs the window and the YaRN frequencies in the prefill and the decode steps.
TEST(GenerateUnderMpirun, EveryLayoutPrintsTheSingleProcessOutput) {
  for (const char* fixture : {"deep-gqa-f32", "gqa-f32", "gqa-bf16", "olmo3-gqa-f32", "olmo3-gqa-bf16"}) {
    const std::string dir = test::source_path(std::string("tests/golden/fixtures/") + fixture);
    std::ifstream in(dir + "/reference.json"), cin(dir + "/config.json");
    const auto ref = nlohmann::json::parse(in);
    const int layers = nlohmann::json::parse(cin)["num_hidden_layers"].get<int>();
    std::string prompt;
    for (int id : ref["prompt_ids"]) {
      if (!prompt.empty()) prompt.push_back(',');
      prompt.append(std::to_string(id));
    }
    const auto single = test::run_olmo2("generate --model " + dir + " --prompt-ids " + prompt + " --max-tokens 6 --format json");
    ASSERT_EQ(single.status, 0) << single.err;
    const auto greedy = ref["greedy_ids"].get<std::vector<int>>();
    EXPECT_EQ(nlohmann::json::parse(single.out)["output_ids"].get<std::vector<int>>(),
              std::vector<int>(greedy.begin(), greedy.begin() + 6))
        << fixture << ": transformers' greedy continuation";
    for (const char* layout : {"--tp 4", "--pp 4", "--tp 2 --pp 2", "--tp 2 --dp 2", "--tp 1"}) {
      if (layers < 4 && std::string(layout) == "--pp 4") continue;  // a stage needs a layer
      const auto r = mpirun(4, "generate --model " + dir + " --prompt-ids " + prompt + " --max-tokens 6 --format json " + layout);
      ASSERT_EQ(r.status, 0) << fixture << " " << layout << ": " << r.err;
      EXPECT_EQ(r.out, single.out) << fixture << " " << layout;  // printed once, by rank 0
    }
  }
}

// Quantized weights (docs/architecture.md §3.2 "Quantized weights"): with a group that
// divides every rank's K (32: o_proj's 32 columns per rank at tp 2), each rank's shard is
// the whole quantization's slice, and every layout prints what one process prints.
TEST(GenerateUnderMpirun, QuantizedWeightsGiveTheSingleProcessOutput) {
  const std::string dir = test::source_path("tests/golden/fixtures/deep-gqa-f32");
  for (const char* f : {"int8", "int4"}) {
    const std::string args = "generate --model " + dir + " --prompt-ids 5,17,3,40,99 --max-tokens 6 --format json "
                             "--weight-group 32 --weights " + f;
    const auto single = test::run_olmo2(args);
    ASSERT_EQ(single.status, 0) << single.err;
    for (const char* layout : {"--tp 2", "--pp 2"}) {
      if (std::string(f) == "int4" && std::string(layout) == "--pp 2") continue;  // stages hold whole layers: int8 shows it
      const auto r = mpirun(2, args + " " + layout);
      ASSERT_EQ(r.status, 0) << f << " " << layout << ": " << r.err;
      EXPECT_EQ(r.out, single.out) << f << " " << layout;
    }
  }
  // The default int8 group here is 64, which tp 2's 32 columns of o_proj do not hold:
  // every rank refuses before reading a weight, one line.
  const auto r = mpirun(2, "generate --model " + dir + " --prompt-ids 1,2 --weights int8 --tp 2");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("weight group 64 does not divide the K of o_proj: 32 on this tensor-parallel rank (64 in the model)"));
}

// generation_config.json's eos ids (docs/architecture.md §8, "Stop ids and sampling
// defaults") are read by every rank: a continuation that stops at its third token stops
// there in every layout, printed once; a strict refusal is one line, on every rank alike.
TEST(GenerateUnderMpirun, GenerationConfigStopIdsHoldInEveryLayout) {
  const std::string fixture = test::source_path("tests/golden/fixtures/gqa-f32");
  std::ifstream in(fixture + "/reference.json");
  const auto ref = nlohmann::json::parse(in);
  const auto greedy = ref["greedy_ids"].get<std::vector<int>>();
  test::TempDir dir;
  for (const auto& f : std::filesystem::directory_iterator(fixture)) {
    std::filesystem::copy_file(f.path(), dir.file(f.path().filename().string()));
  }
  std::ofstream(dir.file("generation_config.json")) << nlohmann::json{{"eos_token_id", {190, greedy[2]}}}.dump();
  std::string prompt;
  for (int id : ref["prompt_ids"]) prompt += (prompt.empty() ? "" : ",") + std::to_string(id);
  const std::string args = "generate --model " + dir.path() + " --prompt-ids " + prompt + " --max-tokens 6 --format json";
  const auto single = test::run_olmo2(args);
  ASSERT_EQ(single.status, 0) << single.err;
  EXPECT_EQ(nlohmann::json::parse(single.out)["output_ids"].get<std::vector<int>>(),
            std::vector<int>(greedy.begin(), greedy.begin() + 3));
  for (const char* layout : {"--tp 2", "--pp 2"}) {
    const auto r = mpirun(2, args + " " + layout);
    ASSERT_EQ(r.status, 0) << layout << ": " << r.err;
    EXPECT_EQ(r.out, single.out) << layout;
  }
  // No tokenizer here: the strict flag refuses on every rank, one message.
  const auto r = mpirun(2, args + " --tp 2 --strict-special-tokens");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("olmo2: error: --strict-special-tokens: no tokenizer to check the special ids against"));
  EXPECT_EQ(r.err.find("olmo2: error:"), r.err.rfind("olmo2: error:")) << r.err;
}

// A file local to each node can fail one rank's checks only (here rank 1's copy of the
// model directory lacks tokenizer.json, which --strict-special-tokens needs): the lowest
// failing rank speaks, once, and every rank stops — none waits in a collective its peer
// never reaches (docs/architecture.md §8, "Stop ids and sampling defaults").
TEST(GenerateUnderMpirun, AChecksFailureOnOneRankOnlyStopsEveryRankWithItsMessage) {
  const std::string fixture = test::source_path("tests/golden/fixtures/olmo3-tok-f32");
  std::string tok = test::source_path("data/dolma2-tokenizer.json");
  if (!std::filesystem::exists(tok)) tok = test::source_path("../shared/data/dolma2-tokenizer.json");
  test::TempDir root;
  for (const char* r : {"r0", "r1"}) {
    const std::string m = root.path() + "/" + r + "/m";
    std::filesystem::create_directories(m);
    for (const auto& f : std::filesystem::directory_iterator(fixture)) {
      std::filesystem::copy_file(f.path(), m + "/" + f.path().filename().string());
    }
    if (std::string(r) == "r0") std::filesystem::copy_file(tok, m + "/tokenizer.json");
  }
  const auto r = test::run_olmo2_with(
      "timeout 120 " + std::string(OLMO2_MPIEXEC) + " -np 2 --oversubscribe --allow-run-as-root sh -c 'cd " +
          root.path() + "/r$OMPI_COMM_WORLD_RANK && exec " + OLMO2_BINARY +
          " generate --model m --prompt-ids 1,2 --max-tokens 2 --pp 2 --strict-special-tokens'",
      "");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.status, 124) << "the job hung: " << r.err;
  EXPECT_THAT(r.err, HasSubstr("olmo2: error: rank 1: --strict-special-tokens: no tokenizer to check the special ids "
                               "against (no file m/tokenizer.json)"));
  EXPECT_EQ(r.err.find("olmo2: error:"), r.err.rfind("olmo2: error:")) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(GenerateUnderMpirun, RefusedLayoutsAndBadPromptsAreReportedOnce) {
  const std::string dir = test::source_path("tests/golden/fixtures/deep-gqa-f32");
  auto r = mpirun(4, "generate --model " + dir + " --prompt-ids 1,2 --tp 3");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("olmo2: error: invalid layout: world 4 is not divisible by tp 3"));
  r = mpirun(2, "generate --model " + dir + " --prompt-ids 1,2 --tp 2 --pp 2");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("world 2"));
  r = mpirun(2, "generate --model " + dir + " --prompt-ids 1,999 --tp 2");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("the prompt: token id 999 at position 1 is outside the vocabulary [0, 202)"));
  EXPECT_EQ(r.out, "");
}

// --device cuda where this process has no GPU (or no CUDA build) is refused before MPI
// starts, by rank 0 alone: one message however many ranks.
TEST(GenerateUnderMpirun, ADeviceWithoutAGpuIsRefusedOnceByRankZero) {
  const std::string dir = test::source_path("tests/golden/fixtures/deep-gqa-f32");
  const std::string args = "generate --model " + dir + " --prompt-ids 1,2 --device cuda --tp 2";
  const auto single = test::run_olmo2(args);
  if (single.status == 0) GTEST_SKIP() << "this machine has a GPU: nothing to refuse";
  ASSERT_EQ(single.status, 2) << single.err;
  const auto r = mpirun(2, args);
  EXPECT_NE(r.status, 0);
  size_t lines = 0;
  for (size_t at = r.err.find("olmo2: error: --device cuda"); at != std::string::npos;
       at = r.err.find("olmo2: error: --device cuda", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << r.err;
  EXPECT_THAT(single.err, HasSubstr("olmo2: error: --device cuda"));
}

}  // namespace
}  // namespace olmo2
