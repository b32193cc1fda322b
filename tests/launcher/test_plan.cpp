// `olmo2 plan` as a user runs it (text, JSON, exit status, bad input), and `olmo2 train`'s
// side of the memory plan: --memory-per-rank refusing a layout on every rank before any
// work, and the per-rank peak lines and peak_rss_bytes of a run (docs/architecture.md §7
// "Memory plan").
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tests/launcher/tiny_model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

const std::string k7B = test::source_path("tests/golden/fixtures/configs/OLMo-2-1124-7B");

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(PlanCli, TextGroupsEqualRanksAndSaysWhetherItFits) {
  const auto r = test::run_olmo2("plan --model " + k7B + " --seq-len 4096 --tp 2 --pp 2 --dp 2 --zero-stage 1 "
                                 "--precision bf16 --device cuda --global-batch 16 --memory-per-rank 80GB");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(r.out, HasSubstr("tp 2 × pp 2 × dp 2 = 8 ranks, ZeRO-1, recompute none, bf16 on cuda"));
  EXPECT_THAT(r.out, HasSubstr("ranks 0-3 (stage 0)"));  // tp × dp of a stage: the same numbers
  EXPECT_THAT(r.out, HasSubstr("ranks 4-7 (stage 1)"));
  EXPECT_THAT(r.out, HasSubstr("fits in 80.00 GB per rank"));
}

TEST(PlanCli, JsonIsOneObjectWhosePartsAddUp) {
  const auto r = test::run_olmo2("plan --model " + k7B + " --seq-len 1024 --pp 2 --dp 2 --zero-stage 3 "
                                 "--recompute full --global-batch 8 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(lines(r.out), 1u) << r.out;
  const json j = json::parse(r.out);
  ASSERT_EQ(j.at("ranks").size(), 4u);
  EXPECT_EQ(j.at("micro_batches_per_step"), 4);
  for (const json& m : j.at("ranks")) {
    int64_t sum = 0;
    for (const char* k : {"weights", "master_weights", "gradients", "optimizer", "activations", "working",
                          "comm_buffers", "kv_cache", "runtime"}) {
      sum += m.at(k).get<int64_t>();
    }
    EXPECT_EQ(sum, m.at("total").get<int64_t>());
    EXPECT_EQ(m.at("micro_batches_held"), m.at("pp") == 0 ? 2 : 1);
    EXPECT_GT(m.at("sent_per_step").at("dp").get<int64_t>(), 0);
  }
  EXPECT_TRUE(j.at("fits").is_null());
}

// Serving: the KV cache's dtype and block count, as serve counts them (docs/architecture.md
// §3.2, §8). OLMo 2 7B: 32 layers of 32 kv heads of 128; at tp 2 a rank holds 16 of them,
// so a block of 16 positions takes 2·32·16·128·16·4 = 8 MiB in f32, 4 MiB in bf16.
TEST(PlanCli, ServingNamesTheKvDtypeAndTheBlocksOfTheCache) {
  const std::string serve = "plan --model " + k7B + " --seq-len 16 --serve --tp 2 --kv-cache-memory 1GiB";
  auto r = test::run_olmo2(serve + " --precision bf16");  // auto: bf16
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("KV cache 1.07 GB: 256 bf16 blocks of 16"));
  EXPECT_THAT(r.out, HasSubstr("4194304 bytes"));
  r = test::run_olmo2(serve + " --precision bf16 --kv-cache-dtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("KV cache 1.07 GB: 128 f32 blocks of 16"));
  r = test::run_olmo2(serve + " --format json");  // fp32: auto is f32
  ASSERT_EQ(r.status, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j.at("kv_cache_dtype"), "f32");
  EXPECT_EQ(j.at("kv_blocks"), 128);
  EXPECT_EQ(j.at("ranks").at(1).at("kv_block_bytes"), 8 << 20);
  r = test::run_olmo2(serve + " --format json --kv-cache-dtype bf16");
  ASSERT_EQ(r.status, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j.at("kv_cache_dtype"), "bf16");
  EXPECT_EQ(j.at("kv_blocks"), 256);
  EXPECT_EQ(j.at("ranks").at(0).at("kv_block_bytes"), 4 << 20);
}

TEST(PlanCli, APlanThatDoesNotFitExitsOneNamingTheRank) {
  const auto r = test::run_olmo2("plan --model " + k7B + " --seq-len 4096 --memory-per-rank 80GB");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("does not fit in 80.00 GB per rank"));
  ASSERT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_THAT(r.err, HasSubstr("olmo2: error: the plan does not fit in --memory-per-rank 80.00 GB: rank 0"));
}

TEST(PlanCli, BadInputIsOneLineNamingTheOption) {
  // Status 2 for a command line train would refuse as one (an option alone is wrong),
  // 1 for what only the model or the layout makes wrong — as olmo2 train has them.
  const std::tuple<std::string, std::string, int> cases[] = {
      {"--seq-len 16 --recompute some", "--recompute must be none, selective or full, got \"some\"", 2},
      {"--seq-len 16 --zero-stage 5", "--zero-stage must be 0, 1, 2 or 3, got 5", 2},
      {"--seq-len 16 --dp 2 --micro-batch 2 --global-batch 6", "--global-batch 6 is not a positive multiple", 2},
      {"--seq-len 16 --serve --dp 2 --zero-stage 3", "--zero-stage and --recompute plan training; --serve plans", 2},
      {"--seq-len 16 --zero-stage 1", "--zero-stage 1 shards over data-parallel ranks; this layout has dp 1", 1},
      {"--seq-len 16 --tp 3", "tp", 1},
      {"--seq-len 16 --memory-per-rank lots", "--memory-per-rank", 2},
      {"--seq-len 16 --memory-per-rank 0x10GB", "--memory-per-rank", 2},
      {"--seq-len 16 --format xml", "--format must be text or json", 2},
      {"--seq-len 16 --kv-cache-dtype bf16", "--kv-cache-dtype plans serving: give --serve too", 2},
      {"--seq-len 16 --serve --kv-cache-dtype f16", "--kv-cache-dtype must be auto, bf16 or f32, got \"f16\"", 2},
      {"", "--seq-len is required", 2}};
  for (const auto& [args, what, status] : cases) {
    const auto r = test::run_olmo2("plan --model " + k7B + " " + args);
    EXPECT_EQ(r.status, status) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(lines(r.err), 1u) << args << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(what)) << args;
  }
}

TEST(PlanCli, RefusesTheModelsTrainRefusesAtZeroStagesTwoAndThree) {
  // The same check as the trainer's (check_zero_stage_model): a plan never says "fits"
  // for a run that olmo2 train would refuse at start.
  const test::TinyModel t;  // 4 heads, 2 kv heads
  nlohmann::json c = nlohmann::json::parse(std::ifstream(t.dir.file("config.json")));
  c["tie_word_embeddings"] = true;
  std::ofstream(t.dir.file("tied.json")) << c.dump();
  const std::pair<std::string, std::string> cases[] = {
      {"--model-config " + t.dir.file("tied.json") + " --dp 2 --zero-stage 3",
       "--zero-stage 3 does not support a model with tie_word_embeddings"},
      {"--model-config " + t.dir.file("config.json") + " --tp 4 --dp 2 --zero-stage 2",
       "--zero-stage 2 with kv heads replicated over TP ranks (2 kv heads, tp 4) is not supported"}};
  for (const auto& [args, what] : cases) {
    const auto r = test::run_olmo2("plan " + args + " --seq-len 16 --memory-per-rank 1GB");
    EXPECT_EQ(r.status, 1) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(lines(r.err), 1u) << args << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(what)) << args;
  }
  // Stage 1 shards only the moments: both plans are made.
  EXPECT_EQ(test::run_olmo2("plan --model-config " + t.dir.file("tied.json") + " --dp 2 --zero-stage 1 --seq-len 16").status, 0);
}

TEST(TrainMemoryPlan, ARunReportsEveryRanksPeakBesideItsPlan) {
  const test::TinyModel t;
  const auto r = test::run_olmo2_with(std::string(OLMO2_MPIEXEC) + " -np 2 --oversubscribe --allow-run-as-root " +
                                          OLMO2_BINARY,
                                      "train " + t.model_and_data() +
                                          " --seq-len 16 --global-batch 4 --steps 2 --threads 1 --dp 2 --log-format json");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* rank : {"memory: rank 0 peak ", "memory: rank 1 peak "}) {
    size_t n = 0;
    for (size_t at = r.err.find(rank); at != std::string::npos; at = r.err.find(rank, at + 1)) ++n;
    EXPECT_EQ(n, 2u) << rank << " after step 1 and at the end:\n" << r.err;
  }
  EXPECT_THAT(r.err, HasSubstr(" GB (plan "));
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) EXPECT_GT(json::parse(line).at("peak_rss_bytes").get<int64_t>(), 1 << 20);
}

TEST(TrainMemoryPlan, MemoryPerRankRefusesOnEveryRankBeforeAnyWork) {
  const test::TinyModel t;
  const auto r = test::run_olmo2_with(std::string(OLMO2_MPIEXEC) + " -np 2 --oversubscribe --allow-run-as-root " +
                                          OLMO2_BINARY,
                                      "train " + t.model_and_data() +
                                          " --seq-len 16 --global-batch 4 --steps 2 --threads 1 --tp 2 "
                                          "--memory-per-rank 10MB");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("--memory-per-rank 0.01 GB (10000000 bytes): rank "));
  EXPECT_THAT(r.err, HasSubstr("by the memory plan (runtime "));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("step 1")));
  size_t errors = 0;
  for (size_t at = r.err.find("olmo2: error"); at != std::string::npos; at = r.err.find("olmo2: error", at + 1)) ++errors;
  EXPECT_EQ(errors, 1u) << r.err;
}

}  // namespace
}  // namespace olmo2
