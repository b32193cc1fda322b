// `olmo2 train` under mpirun: a tp 2 × pp 2 run logs what one process logs (once, from
// rank 0) and writes one Hugging Face model, not per-rank pieces; errors that every
// rank sees are printed once and every rank exits non-zero without hanging.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/launcher/tiny_model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;

test::RunResult mpirun(int np, const std::string& args) {
  return test::run_olmo2_with(std::string(OLMO2_MPIEXEC) + " -np " + std::to_string(np) +
                                  " --oversubscribe --allow-run-as-root " + OLMO2_BINARY,
                              args);
}

/// The tiny model with this test's training options.
struct Tiny : test::TinyModel {
  std::string args(const std::string& extra) const {
    return "train " + model_and_data() +
           " --seq-len 16 --global-batch 8 --steps 4 --lr 1e-2 --warmup-steps 1 --threads 1 "
           "--log-format json " + extra;
  }
};

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) v.push_back(json::parse(line));
  return v;
}

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

TEST(TrainUnderMpirun, TensorAndPipelineParallelRunMatchesOneProcess) {
  Tiny t;
  const test::RunResult one = test::run_olmo2(t.args("--micro-batch 2"));
  ASSERT_EQ(one.status, 0) << one.err;
  const std::string save = t.dir.file("ckpt");
  const test::RunResult four = mpirun(4, t.args("--micro-batch 2 --tp 2 --pp 2 --save-dir " + save));
  ASSERT_EQ(four.status, 0) << four.err;
  const auto a = json_lines(one.out), b = json_lines(four.out);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u) << "rank 0 alone prints the per-step log";
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(), 1e-4 * a[i]["loss"].get<double>());
  }
  EXPECT_EQ(count(four.err, "training "), 1u) << four.err;
  EXPECT_THAT(four.err, HasSubstr("on 4 ranks (tp 2, pp 2, dp 1)"));
  // One HF model and one training state, as a one-process run writes them.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(save + "/step-00000004")) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"config.json", "generation_config.json", "model.safetensors",
                                             "training_state.json", "training_state.safetensors"}));
  // It generates under one process like any checkpoint.
  const test::RunResult gen = test::run_olmo2("generate --model " + save + "/step-00000004 --prompt-ids 1,2,3 --max-tokens 3");
  EXPECT_EQ(gen.status, 0) << gen.err;
}

TEST(TrainUnderMpirun, ErrorsEveryRankSeesArePrintedOnce) {
  Tiny t;
  struct Bad {
    int np;
    std::string extra, message;
  };
  const Bad cases[] = {
      {4, "--tp 3", "world 4 is not divisible by tp 3"},
      {4, "--pp 2 --micro-batch 8", "--global-batch 8 is not divisible by --micro-batch 8 × dp 2 = 16"},
      {2, "--tp 2 --data " + t.dir.file("missing.npy"), "missing.npy"},
      {4, "--pp 4 --pp-layers 1,1,1", "pp-layers"},
      {2, "--tp 2 --zero-stage 3", "--zero-stage must be 0 or 1"},
  };
  for (const Bad& b : cases) {
    const test::RunResult r = mpirun(b.np, t.args(b.extra.find("--micro-batch") == std::string::npos ? b.extra + " --micro-batch 2" : b.extra));
    EXPECT_NE(r.status, 0) << b.extra;
    EXPECT_THAT(r.err, HasSubstr(b.message)) << b.extra;
    EXPECT_EQ(count(r.err, "olmo2: error"), 1u) << b.extra << ": " << r.err;
    EXPECT_EQ(r.out, "") << b.extra;
  }
}

}  // namespace
}  // namespace olmo2
