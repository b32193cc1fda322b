// `olmo2 train --recompute` end to end (docs/architecture.md §7 "Recomputation"): a run
// that changes the mode at a resume continues bit for bit, and an unknown mode is a usage
// error before any work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/launcher/tiny_model.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;

std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) v.push_back(json::parse(line).at("loss").get<double>());
  return v;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string train_args(const test::TinyModel& m, const std::string& save) {
  return "train " + m.model_and_data() + " --seq-len 16 --global-batch 4 --micro-batch 2 --lr 1e-2 --threads 2 " +
         "--log-format json --save-dir " + save;
}

// None for 4 steps, against none for 2 steps, saved, and resumed with --recompute full
// (then selective from another checkpoint of the same run) for the last 2: the same
// losses, weights and AdamW moments, byte for byte; the resume says the mode changed.
TEST(TrainRecomputeCli, AResumeAcrossAChangeOfRecomputeContinuesBitForBit) {
  const test::TinyModel m;
  const std::string a = m.dir.file("a"), b = m.dir.file("b");
  const test::RunResult whole = test::run_olmo2(train_args(m, a) + " --steps 4");
  ASSERT_EQ(whole.status, 0) << whole.err;
  const test::RunResult first = test::run_olmo2(train_args(m, b) + " --steps 4 --save-interval 2 --debug-stop-after 2");
  ASSERT_EQ(first.status, 75) << first.err;
  EXPECT_EQ(json::parse(slurp(b + "/step-00000002/training_state.json")).at("state").at("recompute"), "none");
  for (const char* mode : {"full", "selective"}) {
    fs::remove_all(b + "/step-00000004");
    const test::RunResult second = test::run_olmo2(train_args(m, b) + " --steps 4 --resume --recompute " + mode);
    ASSERT_EQ(second.status, 0) << second.err;
    EXPECT_THAT(second.err, HasSubstr(std::string("note: recompute differs from the checkpoint's (\"none\" -> \"") +
                                      mode + "\")"));
    std::vector<double> got = losses(first.out);
    for (double l : losses(second.out)) got.push_back(l);
    const std::vector<double> want = losses(whole.out);
    ASSERT_EQ(got.size(), 4u) << mode;
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(got[i], want[i]) << mode << " step " << i + 1;
    EXPECT_EQ(slurp(a + "/step-00000004/model.safetensors"), slurp(b + "/step-00000004/model.safetensors")) << mode;
    EXPECT_EQ(slurp(a + "/step-00000004/training_state.safetensors"),
              slurp(b + "/step-00000004/training_state.safetensors"))
        << mode;
    EXPECT_EQ(json::parse(slurp(b + "/step-00000004/training_state.json")).at("state").at("recompute"), mode);
  }
}

TEST(TrainRecomputeCli, AnUnknownModeIsAUsageErrorBeforeAnyWork) {
  const test::TinyModel m;
  const std::string never = m.dir.file("never");
  const test::RunResult r = test::run_olmo2(train_args(m, never) + " --steps 2 --recompute some");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--recompute must be none, selective or full, got \"some\""));
  EXPECT_EQ(r.out, "");
  EXPECT_FALSE(fs::exists(never)) << "a refused run wrote " << never;
}

}  // namespace
}  // namespace olmo2
