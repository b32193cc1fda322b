// `olmo2 info --tp/--pp/--dp/--pp-layers`: the partition plan printed from config.json
// alone, and impossible layouts refused with one line before anything is printed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "launcher/commands.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using test::run_olmo2;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kConfigs = test::source_path("tests/golden/fixtures/configs");

/// A failed run: `status`, nothing on stdout, exactly one "olmo2: error: " line containing `what`.
void expect_refused(const test::RunResult& r, int status, const std::string& what) {
  EXPECT_EQ(r.status, status) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("olmo2: error: ", 0), 0u) << r.err;
  EXPECT_THAT(r.err, HasSubstr(what));
}

/// The cells of the printed table row of world rank `rank` (empty when absent): rank, tp,
/// dp, pp, layers, q_heads, kv_heads, q_rows, kv_rows, mlp_rows, vocab_rows, holds,
/// parameters, bytes, GiB. Cells are separated by two or more spaces.
std::vector<std::string> row(const std::string& out, int rank) {
  const size_t at = out.find("\n" + std::to_string(rank) + " ");
  if (at == std::string::npos) return {};
  const std::string line = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  std::vector<std::string> cells;
  for (size_t i = 0; i < line.size();) {
    const size_t gap = line.find("  ", i);
    cells.push_back(line.substr(i, gap - i));
    if (gap == std::string::npos) break;
    i = line.find_first_not_of(' ', gap);
  }
  return cells;
}

using Cells = std::vector<std::string>;

TEST(CliInfoPlan, ModelShapeMatchesTheConfig) {
  for (const char* name :
       {"OLMo-2-0425-1B", "OLMo-2-1124-7B", "OLMo-2-1124-13B", "OLMo-2-0325-32B"}) {
    const ModelConfig c = ModelConfig::load(kConfigs + "/" + name);
    const parallel::ModelShape s = model_shape(c);
    EXPECT_EQ(s.parameter_count(), c.parameter_count()) << name;
    EXPECT_EQ(s.head_dim, 128) << name;
    EXPECT_EQ(s.kv_heads, c.num_key_value_heads) << name;
  }
}

TEST(CliInfoPlan, WithoutLayoutOptionsInfoIsUnchanged) {
  const auto r = run_olmo2("info --model " + kConfigs + "/OLMo-2-0425-1B");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("parameters              1484916736\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("partition plan")));
}

TEST(CliInfoPlan, PrintsThePlanPerRank) {
  const auto r = run_olmo2("info --model " + kConfigs + "/OLMo-2-0425-1B --tp 4 --pp 4");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("parameters              1484916736\n"));  // the configuration as before
  EXPECT_THAT(r.out, HasSubstr("partition plan: tp 4 x pp 4 x dp 1 = 16 ranks"));
  EXPECT_THAT(r.out, HasSubstr("16 layers as 4,4,4,4"));
  EXPECT_THAT(r.out, HasSubstr("1484916736 unique"));
  // Rank 5: tp 1, dp 0, stage 1; layers 4..7, heads 4..7, q/kv rows 512..1023, MLP rows 2048..4095.
  const int64_t per_layer = (2 * 512 * 2048 + 512) * 2 + 3 * 2048 * 2048 + 2 * 2048;
  EXPECT_EQ(row(r.out, 5),
            (Cells{"5", "1", "0", "1", "[4,8)", "[4,8)", "[4,8)", "[512,1024)", "[512,1024)",
                   "[2048,4096)", "-", "-", std::to_string(4 * per_layer),
                   std::to_string(4 * per_layer * 4), "0.250"}))  // f32 fixture config
      << r.out;
  const Cells r0 = row(r.out, 0), r15 = row(r.out, 15);
  ASSERT_EQ(r0.size(), 15u);
  ASSERT_EQ(r15.size(), 15u);
  EXPECT_EQ(r0[10] + " " + r0[11], "[0,25088) embed");
  EXPECT_EQ(r15[10] + " " + r15[11], "[75264,100352) norm,lm_head");
  EXPECT_EQ(row(r.out, 16), Cells{});
}

TEST(CliInfoPlan, ReplicatedKvHeadsAndDp) {
  const auto r = run_olmo2("info --model " + kConfigs + "/OLMo-2-0325-32B --tp 8 --dp 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("= 16 ranks"));
  EXPECT_THAT(r.out, HasSubstr("8 kv heads, 1 per rank"));
  EXPECT_EQ(row(r.out, 3).at(5), "[15,20)");
  EXPECT_EQ(row(r.out, 3).at(6), "[3,4)");
  EXPECT_EQ(row(r.out, 11).at(2), "1");  // 11 = tp 3 + 8·dp 1
  // Replication needs kv < tp: a config with 2 kv heads at tp 8.
  test::TempDir dir;
  std::ifstream in(kConfigs + "/OLMo-2-0325-32B/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["num_key_value_heads"] = 2;
  std::ofstream(dir.file("config.json")) << cfg.dump();
  const auto g = run_olmo2("info --model " + dir.path() + " --tp 8");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_THAT(g.out, HasSubstr("2 kv heads, each replicated on 4 consecutive ranks"));
  EXPECT_EQ(row(g.out, 5).at(5), "[25,30)");
  EXPECT_EQ(row(g.out, 5).at(6), "[1,2) replica 1/4");
  EXPECT_EQ(row(g.out, 5).at(8), "[128,256)");
}

TEST(CliInfoPlan, UnevenAndExplicitStagesCaseC3) {
  test::TempDir dir;
  std::ifstream in(kConfigs + "/OLMo-2-0425-1B/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["num_hidden_layers"] = 30;
  std::ofstream(dir.file("config.json")) << cfg.dump();
  const std::string m = "info --model " + dir.path();
  auto r = run_olmo2(m + " --pp 4");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("30 layers as 8,8,7,7"));
  EXPECT_EQ(row(r.out, 0).at(4), "[0,8)");
  EXPECT_EQ(row(r.out, 1).at(4), "[8,16)");
  EXPECT_EQ(row(r.out, 2).at(4), "[16,23)");
  EXPECT_EQ(row(r.out, 3).at(4), "[23,30)");
  r = run_olmo2(m + " --pp-layers 9,7,7,7");  // pp taken from the list
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("30 layers as 9,7,7,7"));
  EXPECT_EQ(row(r.out, 1).at(4), "[9,16)");
  expect_refused(run_olmo2(m + " --pp 4 --pp-layers 8,8,7"), 1,
                 "--pp-layers 8,8,7 has 3 entries for pp 4");
  expect_refused(run_olmo2(m + " --pp-layers 8,8,7,6"), 1,
                 "--pp-layers 8,8,7,6 sums to 29, the model has 30 layers");
  expect_refused(run_olmo2(m + " --pp 31"), 1, "num_hidden_layers 30 < pp 31");
}

// --pp-virtual: the chunk map of the interleaved 1F1B (docs/architecture.md §5), the
// layers column naming each rank's chunks, and the refusals naming the numbers.
TEST(CliInfoPlan, PpVirtualPrintsTheChunkMap) {
  const std::string m = "info --model " + kConfigs + "/OLMo-2-0425-1B";  // 16 layers
  auto r = run_olmo2(m + " --pp 4 --pp-virtual 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("model chunks: 16 layers over pp 4 x pp-virtual 2"));
  EXPECT_THAT(r.out, HasSubstr("stage 0 chunk 0 (virtual stage 0): layers [0,2), embedding\n"));
  EXPECT_THAT(r.out, HasSubstr("stage 0 chunk 1 (virtual stage 4): layers [8,10)\n"));
  EXPECT_THAT(r.out, HasSubstr("stage 3 chunk 1 (virtual stage 7): layers [14,16), final norm and lm_head\n"));
  EXPECT_EQ(row(r.out, 1).at(4), "[2,4)+[10,12)");
  EXPECT_THAT(run_olmo2(m + " --pp 4").out, Not(HasSubstr("model chunks")));
  expect_refused(run_olmo2(m + " --pp 4 --pp-virtual 3"), 1,
                 "--pp-virtual 3: num_hidden_layers 16 is not divisible by pp 4 × pp-virtual 3 = 12");
  expect_refused(run_olmo2(m + " --pp-virtual 2"), 1, "--pp-virtual 2 needs a pipeline (pp ≥ 2), the layout has pp 1");
  expect_refused(run_olmo2(m + " --pp-layers 8,8 --pp-virtual 2"), 1, "cannot be combined with --pp-layers");
  expect_refused(run_olmo2(m + " --pp 2 --pp-virtual 0"), 2, "--pp-virtual must be at least 1, got 0");
}

TEST(CliInfoPlan, ImpossibleLayoutsExitOneWithOneLine) {
  const std::string m32 = "info --model " + kConfigs + "/OLMo-2-0325-32B";
  expect_refused(run_olmo2(m32 + " --tp 16"), 1,
                 "num_attention_heads 40 is not divisible by tp 16");
  expect_refused(run_olmo2(m32 + " --tp 5"), 1,
                 "num_key_value_heads 8 neither divisible by nor dividing tp 5");
  expect_refused(run_olmo2(m32 + " --tp 40"), 1,
                 "intermediate_size 27648 is not divisible by tp 40");
  expect_refused(run_olmo2("info --model " + kConfigs + "/OLMo-2-0425-1B --pp 17"), 1,
                 "num_hidden_layers 16 < pp 17");
}

TEST(CliInfoPlan, MalformedLayoutOptionsExitTwo) {
  const std::string m = "info --model " + kConfigs + "/OLMo-2-0425-1B";
  expect_refused(run_olmo2(m + " --tp abc"), 2, "tp");
  expect_refused(run_olmo2(m + " --pp 1.5"), 2, "pp");
  expect_refused(run_olmo2(m + " --tp 0"), 2, "--tp must be at least 1, got 0");
  expect_refused(run_olmo2(m + " --dp -1"), 2, "--dp must be at least 1, got -1");
  expect_refused(run_olmo2(m + " --pp-layers 8,x"), 2, "--pp-layers: \"x\" is not a layer count");
  expect_refused(run_olmo2(m + " --pp-layers 8,,8"), 2, "--pp-layers: \"\" is not a layer count");
  expect_refused(run_olmo2(m + " --pp-layers 16,0"), 2, "--pp-layers: \"0\" is not a layer count");
  // generate takes a layout too; one process cannot hold tp 2 (checked before any weights).
  expect_refused(
      run_olmo2("generate --model " + kConfigs + "/OLMo-2-0425-1B --prompt-ids 1 --tp 2"), 1,
      "invalid layout: world 1 is not divisible by tp 2");
  expect_refused(run_olmo2("tokenize --tokenizer x --ids --tp 2"), 2, "unrecognised option '--tp'");
}

// Context parallelism (docs/architecture.md §4): the cp axis between tp and dp, a cp
// column, every CP rank holding its (tp, pp) shard; --cp is train's and info's only.
TEST(CliInfoPlan, ContextParallelRanksHoldTheirShardWhole) {
  const std::string m = "info --model " + kConfigs + "/OLMo-2-0425-1B";
  const auto r = run_olmo2(m + " --tp 2 --cp 2 --dp 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("partition plan: tp 2 x pp 1 x dp 2 x cp 2 = 8 ranks "
                               "(rank = tp_rank + tp*(cp_rank + cp*(dp_rank + dp*stage)))"));
  // Rank 7 = tp 1 + 2·(cp 1 + 2·dp 1): cells rank, tp, cp, dp, pp, layers, q_heads.
  const Cells r7 = row(r.out, 7), r1 = row(r.out, 1);
  ASSERT_GE(r7.size(), 7u) << r.out;
  EXPECT_EQ(Cells(r7.begin(), r7.begin() + 5), (Cells{"7", "1", "1", "1", "0"}));
  EXPECT_EQ(Cells(r7.begin() + 5, r7.end()), Cells(r1.begin() + 5, r1.end())) << "rank 7 holds rank 1's shard";
  expect_refused(run_olmo2(m + " --cp 0"), 2, "--cp must be at least 1, got 0");
  expect_refused(run_olmo2("generate --model " + kConfigs + "/OLMo-2-0425-1B --prompt-ids 1 --cp 2"), 2,
                 "unrecognised option '--cp'");
}

TEST(CliInfoPlan, LayoutFromIniConfig) {
  test::TempDir dir;
  std::ofstream(dir.file("run.ini"))
      << "model = " << kConfigs << "/OLMo-2-0425-1B\ntp = 2\npp = 2\n";
  auto r = run_olmo2("info --config " + dir.file("run.ini"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("partition plan: tp 2 x pp 2 x dp 1 = 4 ranks"));
  r = run_olmo2("info --config " + dir.file("run.ini") + " --tp 4");  // the command line wins
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("partition plan: tp 4 x pp 2 x dp 1 = 8 ranks"));
}

TEST(Options, ParseLayerList) {
  EXPECT_EQ(parse_layer_list("8,8,7,7", "pp-layers"), (std::vector<int64_t>{8, 8, 7, 7}));
  EXPECT_THROW(parse_layer_list("8, 8", "pp-layers"), UsageError);
  EXPECT_THROW(parse_layer_list("0", "pp-layers"), UsageError);
  EXPECT_THROW(parse_layer_list("8,", "pp-layers"), UsageError);
  EXPECT_THROW(parse_layer_list("99999999999999999999", "pp-layers"), UsageError);
}

}  // namespace
}  // namespace olmo2
