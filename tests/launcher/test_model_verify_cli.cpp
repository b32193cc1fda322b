// `--model DIR` on a checkpoint: generate and serve verify its files before any weight is
// read (docs/architecture.md §7 "Checkpoint integrity"), so flipped bits in the weights —
// finite, loadable, silently wrong — are refused with the file named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/launcher/tiny_model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ModelVerifyCli, GenerateAndServeRefuseACheckpointWithFlippedBits) {
  test::TinyModel t;
  const std::string save = t.dir.file("run"), ckpt = save + "/step-00000002";
  const test::RunResult train =
      test::run_olmo2("train " + t.model_and_data() + " --seq-len 16 --global-batch 4 --steps 2 --threads 1 --save-dir " + save);
  ASSERT_EQ(train.status, 0) << train.err;
  const std::string generate = "generate --model " + ckpt + " --prompt-ids 1,2 --max-tokens 2 --threads 1";
  const test::RunResult intact = test::run_olmo2(generate);
  ASSERT_EQ(intact.status, 0) << intact.err;
  EXPECT_THAT(intact.err, Not(HasSubstr("warning")));
  {
    std::fstream f(ckpt + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    // A byte of the last tensor's data (lm_head): the weight stays a loadable f32.
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(ckpt + "/model.safetensors") - 101));
    f.put('\x3c');
  }
  const test::RunResult g = test::run_olmo2(generate);
  EXPECT_EQ(g.status, 1);
  EXPECT_THAT(g.err, HasSubstr("--model " + ckpt + ": model.safetensors: expected "));
  EXPECT_EQ(g.out, "");
  // serve stops before it loads a weight or listens (timeout: a regression must not hang).
  const test::RunResult s =
      test::run_olmo2_with("timeout 60 " + std::string(OLMO2_BINARY), "serve --model " + ckpt + " --port 18779");
  EXPECT_EQ(s.status, 1) << s.err;
  EXPECT_THAT(s.err, HasSubstr("--model " + ckpt + ": model.safetensors: expected "));
  // A checkpoint from before checksums: loaded, with one warning line.
  nlohmann::json j = nlohmann::json::parse(std::ifstream(ckpt + "/training_state.json"));
  j.erase("files");
  std::ofstream(ckpt + "/training_state.json") << j.dump();
  const test::RunResult old = test::run_olmo2(generate);
  EXPECT_EQ(old.status, 0) << old.err;
  EXPECT_THAT(old.err, HasSubstr("lists no checksums"));
}

}  // namespace
}  // namespace olmo2
