// Every rank of a job runs the same job (docs/architecture.md §12 "One job, every
// rank"): ranks started with other options than rank 0 — through a wrapper that adds
// options on rank 1 only, as an mpirun app file would — are refused before any work with
// one line naming the rank, the option and both values, and status 2, instead of
// training silently wrong or hanging in a collective until its timeout; a usage error on
// rank 1 alone reaches the user as one line from rank 0. Options each rank may hold for
// itself (--threads) may differ. For train, generate, trace and serve.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/launcher/tiny_model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

/// `olmo2 ARGS` on `np` ranks under mpirun, rank 1 given `rank1` after ARGS and the
/// other ranks `others` (a wrapper shell picks by OMPI_COMM_WORLD_RANK). Paths hold no
/// spaces or quotes here.
test::RunResult mpirun_ranks(int np, const std::string& args, const std::string& rank1,
                             const std::string& others = "") {
  const std::string bin = OLMO2_BINARY;
  const std::string script = "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exec " + bin + " " + args + " " + rank1 +
                             "; else exec " + bin + " " + args + " " + others + "; fi";
  return test::run_olmo2_with(std::string(OLMO2_MPIEXEC) + " -np " + std::to_string(np) +
                                  " --oversubscribe --allow-run-as-root sh -c",
                              "'" + script + "'");
}

struct Tiny : test::TinyModel {
  /// A training command; `own` is the option a case sets itself on each rank (left out here).
  std::string train(const std::string& layout, const std::string& own = "") const {
    std::string a = "train " + model_and_data() + " --seq-len 16 --warmup-steps 1 --log-format json " + layout;
    for (const char* o : {"--global-batch 8", "--steps 4", "--lr 1e-2"}) {
      if (own.empty() || std::string(o).rfind(own, 0) != 0) a += std::string(" ") + o;
    }
    return a;
  }
};

/// One refused job: status 2 within a minute (no collective timeout), one line from
/// rank 0 naming `message`, no step run, nothing saved.
void expect_refused(const test::RunResult& r, const std::string& message, const std::string& what,
                    double seconds, const std::string& save_dir = "") {
  EXPECT_EQ(r.status, 2) << what << ": " << r.err;
  EXPECT_THAT(r.err, HasSubstr(message)) << what;
  EXPECT_EQ(count(r.err, "olmo2: error"), 1u) << what << ": " << r.err;
  EXPECT_EQ(r.out, "") << what << ": no step may run";
  EXPECT_LT(seconds, 60) << what << ": refused at start, not after a collective timeout";
  if (!save_dir.empty()) {
    EXPECT_FALSE(fs::exists(save_dir) && !fs::is_empty(save_dir)) << what << ": a refused run saved";
  }
}

// The options the careless-user probe found training silently wrong or hanging: each
// one differs on rank 1 only.
TEST(OneJob, TrainRanksGivenOtherOptionsAreRefusedBeforeAnyWork) {
  Tiny t;
  struct Case {
    std::string layout, rank0, rank1, message;
  };
  const Case cases[] = {
      {"--dp 2", "--lr 1e-2", "--lr 5e-2", "rank 1 has --lr 0.05, rank 0 --lr 0.01"},
      {"--tp 2", "", "--seed 7", "rank 1 has --seed 7, rank 0 no --seed"},
      {"--dp 2", "--global-batch 8", "--global-batch 16", "rank 1 has --global-batch 16, rank 0 --global-batch 8"},
      {"--pp 2", "--precision fp32", "--precision bf16", "rank 1 has --precision bf16, rank 0 --precision fp32"},
      {"--dp 2", "--clip-grad 1", "--clip-grad 0.5", "rank 1 has --clip-grad 0.5, rank 0 --clip-grad 1"},
      {"--dp 2", "--save-interval 2", "--save-interval 3", "rank 1 has --save-interval 3, rank 0 --save-interval 2"},
      {"--dp 2", "--steps 4", "--steps 5", "rank 1 has --steps 5, rank 0 --steps 4"},
      {"--dp 2", "", "--zero-stage 1", "rank 1 has --zero-stage 1, rank 0 no --zero-stage"},
      {"--pp 2", "--micro-batch 4", "--micro-batch 1", "rank 1 has --micro-batch 1, rank 0 --micro-batch 4"},
  };
  for (const Case& c : cases) {
    const std::string save = t.dir.file("save-" + std::to_string(&c - cases));
    const auto t0 = std::chrono::steady_clock::now();
    const std::string own = c.rank1.substr(0, c.rank1.find(' '));
    const test::RunResult r = mpirun_ranks(2, t.train(c.layout + " --save-dir " + save, own), c.rank1, c.rank0);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    expect_refused(r, "the ranks were started with different options: " + c.message, c.rank1, s, save);
  }
  // Each rank's own: another thread count is not another job.
  const test::RunResult ok = mpirun_ranks(2, t.train("--dp 2"), "--threads 1", "--threads 2");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(count(ok.out, "\n"), 4u) << ok.out;
}

// A usage error on rank 1 alone: one line from rank 0 naming the rank, status 2 (it
// used to print nothing, every rank 0 message being kept for rank 0's own errors).
TEST(OneJob, AUsageErrorOnOneRankIsPrintedOnceByRankZero) {
  Tiny t;
  for (const auto& [extra, message] :
       {std::pair<std::string, std::string>{"--bogus 1", "rank 1: train: unrecognised option '--bogus'"},
        {"--lr 1e-3", "rank 1: train: option '--lr' cannot be specified more than once"}}) {
    const auto t0 = std::chrono::steady_clock::now();
    const test::RunResult r = mpirun_ranks(2, t.train("--dp 2"), extra);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.status, 2) << extra << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("olmo2: error: " + message)) << extra;
    EXPECT_EQ(count(r.err, "olmo2: error"), 1u) << extra << ": " << r.err;
    EXPECT_LT(s, 60) << extra;
  }
}

// The same agreement on the other commands that run under mpirun.
TEST(OneJob, GenerateTraceAndServeRanksGivenOtherOptionsAreRefused) {
  const std::string model = test::source_path("tests/golden/fixtures/gqa-f32");
  struct Case {
    std::string args, rank1, message;
  };
  test::TempDir dir;
  std::ofstream(dir.file("prompts.jsonl")) << "{\"prompt_ids\": [1, 2, 3]}\n";
  const Case cases[] = {
      {"generate --model " + model + " --prompt-ids 1,2,3 --max-tokens 3 --tp 2", "--temperature 0.5",
       "rank 1 has --temperature 0.5, rank 0 no --temperature"},
      {"trace --model " + model + " --prompts " + dir.file("prompts.jsonl") +
           " --activations '\\''[\"layers.0.layer_output\"]'\\'' --tp 2",
       "--collective-timeout 30", "rank 1 has --collective-timeout 30, rank 0 no --collective-timeout"},
      {"serve --model " + model + " --tokenizer " + test::source_path("data/dolma2-tokenizer.json") +
           " --port 0 --tp 2",
       "--kv-cache-memory 64MiB", "rank 1 has --kv-cache-memory 64MiB, rank 0 no --kv-cache-memory"},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const test::RunResult r = mpirun_ranks(2, c.args, c.rank1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    expect_refused(r, "the ranks were started with different options: " + c.message, c.rank1, s);
  }
}

}  // namespace
}  // namespace olmo2
