// `olmo2 train` under mpirun: a tp 2 × pp 2 run logs what one process logs (once, from
// rank 0) and writes one Hugging Face model, not per-rank pieces; errors that every
// rank sees are printed once and every rank exits non-zero without hanging; SIGUSR1 to
// mpirun stops every rank with a checkpoint and status 75, which mpirun returns.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/launcher/background.h"
#include "tests/launcher/tiny_model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

test::RunResult mpirun(int np, const std::string& args) {
  return test::run_olmo2_with(std::string(OLMO2_MPIEXEC) + " -np " + std::to_string(np) +
                                  " --oversubscribe --allow-run-as-root " + OLMO2_BINARY,
                              args);
}

/// The tiny model with this test's training options.
struct Tiny : test::TinyModel {
  explicit Tiny(bool olmo3 = false) : test::TinyModel(olmo3) {}
  std::string args(const std::string& extra, int64_t steps = 4) const {
    return "train " + model_and_data() + " --seq-len 16 --global-batch 8 --steps " + std::to_string(steps) +
           " --lr 1e-2 --warmup-steps 1 --threads 1 --log-format json " + extra;
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
  for (const auto& e : fs::directory_iterator(save)) {
    EXPECT_EQ(e.path().filename().string().find(".olmo2-probe-"), std::string::npos) << "the storage probe is removed";
  }
  // It generates under one process like any checkpoint.
  const test::RunResult gen = test::run_olmo2("generate --model " + save + "/step-00000004 --prompt-ids 1,2,3 --max-tokens 3");
  EXPECT_EQ(gen.status, 0) << gen.err;
}

// Olmo 3 (the tiny model's sliding and YaRN variant): tp 2 × pp 2 follows one process,
// and the checkpoint's config.json keeps the layer types, the window and the per-type
// RoPE (transformers 5's rope_parameters) of the run's config.
TEST(TrainUnderMpirun, Olmo3TensorAndPipelineParallelRunMatchesOneProcess) {
  Tiny t(true);
  const test::RunResult one = test::run_olmo2(t.args("--micro-batch 2"));
  ASSERT_EQ(one.status, 0) << one.err;
  const std::string save = t.dir.file("ckpt");
  const test::RunResult four = mpirun(4, t.args("--micro-batch 2 --tp 2 --pp 2 --save-dir " + save));
  ASSERT_EQ(four.status, 0) << four.err;
  const auto a = json_lines(one.out), b = json_lines(four.out);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(), 1e-4 * a[i]["loss"].get<double>());
  }
  std::ifstream in_cfg(t.dir.file("config.json")), out_cfg(save + "/step-00000004/config.json");
  const json given = json::parse(in_cfg), saved = json::parse(out_cfg);
  EXPECT_EQ(saved["architectures"], given["architectures"]);
  EXPECT_EQ(saved["layer_types"], given["layer_types"]);
  EXPECT_EQ(saved["sliding_window"], given["sliding_window"]);
  for (const char* type : {"full_attention", "sliding_attention"}) {
    for (const auto& [key, value] : given["rope_parameters"][type].items()) {
      EXPECT_EQ(saved["rope_parameters"][type][key], value) << type << " " << key << ": " << saved.dump();
    }
  }
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
      {2, "--tp 2 --zero-stage 3", "--zero-stage 3 shards over data-parallel ranks; this layout has dp 1"},
      {2, "--dp 2 --zero-stage 4", "--zero-stage must be 0, 1, 2 or 3"},
  };
  for (const Bad& b : cases) {
    const test::RunResult r = mpirun(b.np, t.args(b.extra.find("--micro-batch") == std::string::npos ? b.extra + " --micro-batch 2" : b.extra));
    EXPECT_NE(r.status, 0) << b.extra;
    EXPECT_THAT(r.err, HasSubstr(b.message)) << b.extra;
    EXPECT_EQ(count(r.err, "olmo2: error"), 1u) << b.extra << ": " << r.err;
    EXPECT_EQ(r.out, "") << b.extra;
  }
}

// The model's EOS against the data's (docs/architecture.md §7 "Token data and its EOS"):
// every rank reads the tokenize.json beside --data and stops alike, one message; allowed,
// one warning line (rank 0's).
TEST(TrainUnderMpirun, AnEosMismatchStopsEveryRankWithOneMessage) {
  Tiny t;
  std::ofstream(t.dir.file("tokenize.json")) << R"({"eos_id": 3, "eos_token": "<|x|>"})";
  const test::RunResult r = mpirun(2, t.args("--tp 2 --micro-batch 2"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(count(r.err, "olmo2: error"), 1u) << r.err;
  EXPECT_THAT(r.err, HasSubstr("olmo2: error: --data " + t.dir.file("tokens.npy") + ": " + t.dir.file("tokenize.json") +
                               " says its documents end with <|x|> (id 3), which " + t.dir.file("config.json") +
                               " eos_token_id [96] does not include"));
  EXPECT_EQ(r.out, "");
  const test::RunResult ok = mpirun(2, t.args("--tp 2 --micro-batch 2 --allow-eos-mismatch", 1));
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(count(ok.err, "warning: --data"), 1u) << ok.err;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// docs/architecture.md §12 "Exit status": SIGUSR1 to mpirun (forwarded to every rank)
// stops the job after one step with a checkpoint, every rank exits 75, and Open MPI's
// mpirun returns 75 (the first non-zero status). A wrapper records each rank's own
// status: olmo2 and its recorder run in a session of their own, where the SIGKILL that
// mpirun sends to a rank's process group once the first rank has ended cannot take the
// recorder; the wrapper passes on the USR1 and TERM that mpirun sends.
TEST(TrainUnderMpirun, SigusrOneToMpirunStopsEveryRankWithStatus75) {
  Tiny t;
  const std::string save = t.dir.file("ckpt"), out = t.dir.file("out.txt"), err = t.dir.file("err.txt");
  const std::string wrapper = t.dir.file("record-status.sh");
  std::ofstream(wrapper) << "#!/bin/bash\n"
                            "setsid bash -c 'trap : USR1 TERM; \"$@\"; s=$?; echo $s > "
                         << t.dir.path()
                         << "/status.$OMPI_COMM_WORLD_RANK; exit $s' record \"$@\" &\n"
                            "c=$!\n"
                            "trap 'kill -USR1 -- -$c' USR1\n"
                            "trap 'kill -TERM -- -$c' TERM\n"
                            "while wait $c; s=$?; kill -0 $c 2>/dev/null; do :; done\n"
                            "exit $s\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  test::Background run(std::string(OLMO2_MPIEXEC) + " -np 4 --oversubscribe --allow-run-as-root " + wrapper + " " +
                       OLMO2_BINARY + " " + t.args("--micro-batch 2 --tp 2 --pp 2 --save-dir " + save, 100000) +
                       " > " + out + " 2> " + err);
  const auto t0 = std::chrono::steady_clock::now();
  int early = -1;
  while (slurp(out).empty() && (early = run.wait_for(0.1)) == -1 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
  }
  ASSERT_EQ(early, -1) << "mpirun ended before the signal: " << slurp(err);
  ASSERT_FALSE(slurp(out).empty()) << "no step logged within 120 s: " << slurp(err);
  run.signal(SIGUSR1);
  EXPECT_EQ(run.wait(), 75) << slurp(err);
  for (int r = 0; r < 4; ++r) {
    const std::string file = t.dir.file("status." + std::to_string(r));
    for (int i = 0; i < 100 && slurp(file).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(slurp(file), "75\n") << "rank " << r << ": " << slurp(err);
  }
  const std::vector<json> lines = json_lines(slurp(out));
  ASSERT_FALSE(lines.empty());
  const int64_t last = lines.back()["step"].get<int64_t>();
  char name[32];
  std::snprintf(name, sizeof name, "/step-%08lld", static_cast<long long>(last));
  EXPECT_TRUE(fs::exists(save + name + "/training_state.json")) << save + name;
  EXPECT_THAT(slurp(err), HasSubstr("stop requested: stopped after step " + std::to_string(last) + " (checkpoint written)"));
  EXPECT_EQ(count(slurp(err), "stop requested"), 1u) << "rank 0 alone says so";
}

/// `mpirun` with ranks 0, 1 as they are and ranks 2, 3 each in a mount namespace of its
/// own where `mounts` (shell commands) ran first: a node that does not share the save
/// directory, on one machine. Both halves run `olmo2 ARGS`.
test::RunResult mpirun_split(const std::string& mounts, const std::string& args) {
  const std::string common = std::string(OLMO2_MPIEXEC) + " --oversubscribe --allow-run-as-root";
  return test::run_olmo2_with(common + " -np 2 " + OLMO2_BINARY + " " + args + " : -np 2 unshare --mount sh -c '" +
                                  mounts + " && exec " + OLMO2_BINARY + " \"$@\"' sh",
                              args);
}

/// Why mount namespaces cannot be used here ("" when `unshare --mount` and a tmpfs mount work).
std::string mount_namespaces_refused(const std::string& dir) {
  const int status = std::system(("unshare --mount sh -c 'mount -t tmpfs none " + dir + "' 2>/dev/null").c_str());
  return status == 0 ? "" : "unshare --mount / mount -t tmpfs is refused here (needs root or CAP_SYS_ADMIN)";
}

std::string host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// docs/architecture.md §7 "Shared storage": ranks 2, 3 run where a tmpfs hides the save
// directory's parent (a node-local --save-dir). Before any step, rank 0 names them with
// their host in one error and every rank exits 1; the probe file is removed.
TEST(TrainUnderMpirun, ASaveDirectoryOnlyRankZeroSeesIsRefusedBeforeAnyWork) {
  Tiny t;
  const std::string nfs = t.dir.file("nfs"), save = nfs + "/ckpt";
  fs::create_directories(nfs);
  if (const std::string why = mount_namespaces_refused(nfs); !why.empty()) GTEST_SKIP() << why;
  const std::string hide = "mount -t tmpfs none " + nfs;
  const test::RunResult fresh = mpirun_split(hide, t.args("--micro-batch 2 --tp 2 --pp 2 --save-dir " + save));
  EXPECT_EQ(fresh.status, 1) << fresh.err;
  EXPECT_THAT(fresh.err, HasSubstr("olmo2: error: ranks 2, 3 on " + host() + " do not see --save-dir " + save +
                                   " (it is not shared storage): rank 2: cannot open " + save + "/.olmo2-probe-"));
  EXPECT_THAT(fresh.err, HasSubstr(": No such file or directory"));
  EXPECT_EQ(count(fresh.err, "olmo2: error"), 1u) << fresh.err;
  EXPECT_EQ(fresh.out, "") << "no step was taken";
  EXPECT_FALSE(fs::exists(save)) << "the probe and the directory made for it are removed";

  // A resume from a checkpoint those ranks cannot see: refused the same way, before
  // "resumed from" (it used to fail later with "cannot open …/config.json").
  ASSERT_EQ(test::run_olmo2(t.args("--micro-batch 2 --save-dir " + save, 2)).status, 0);
  const test::RunResult resume =
      mpirun_split(hide, t.args("--micro-batch 2 --tp 2 --pp 2 --resume auto --save-dir " + save));
  EXPECT_EQ(resume.status, 1) << resume.err;
  EXPECT_THAT(resume.err, HasSubstr("olmo2: error: ranks 2, 3 on " + host() + " do not see --save-dir " + save +
                                    " (it is not shared storage)"));
  EXPECT_THAT(resume.err, Not(HasSubstr("resumed from")));
  EXPECT_EQ(count(resume.err, "olmo2: error"), 1u) << resume.err;
  for (const auto& e : fs::directory_iterator(save)) {
    EXPECT_EQ(e.path().filename().string().find(".olmo2-probe-"), std::string::npos) << e.path();
  }
}

// Ranks 2, 3 see the save directory but another checkpoint at rank 0's path (a bind
// mount of an edited copy over it): the XXH3-128 of training_state.json differs, and the
// error names them and both digests.
TEST(TrainUnderMpirun, ACheckpointThatDiffersOnSomeRanksIsRefused) {
  Tiny t;
  const std::string save = t.dir.file("ckpt"), step = save + "/step-00000002", copy = t.dir.file("copy");
  if (const std::string why = mount_namespaces_refused(t.dir.path()); !why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(test::run_olmo2(t.args("--micro-batch 2 --save-dir " + save, 2)).status, 0);
  fs::copy(step, copy);
  std::ofstream(copy + "/training_state.json", std::ios::app) << "\n";
  const test::RunResult r = mpirun_split("mount --bind " + copy + " " + step,
                                         t.args("--micro-batch 2 --tp 2 --pp 2 --resume auto --save-dir " + save));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("olmo2: error: ranks 2, 3 on " + host() + " do not see rank 0's checkpoint " + step +
                               " (--save-dir " + save + " is not the same storage on every node): rank 2: " + step +
                               "/training_state.json has XXH3-128 "));
  EXPECT_THAT(r.err, Not(HasSubstr("do not see --save-dir")));
  EXPECT_THAT(r.err, Not(HasSubstr("resumed from")));
  EXPECT_EQ(count(r.err, "olmo2: error"), 1u) << r.err;
}

// A checkpoint's files are dealt over the ranks for verification (sorted names: rank 1 of
// 2 hashes generation_config.json and training_state.safetensors): a corruption only rank 1
// sees stops every rank, with one message naming the file, and no rank hangs or trains.
TEST(TrainUnderMpirun, ACorruptFileOneRankVerifiesStopsEveryRank) {
  Tiny t;
  const std::string save = t.dir.file("run");
  const test::RunResult first = test::run_olmo2(t.args("--micro-batch 2 --save-interval 2 --debug-stop-after 2 --save-dir " + save));
  ASSERT_EQ(first.status, 75) << first.err;  // stopped early, with its checkpoint
  const std::string file = save + "/step-00000002/training_state.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 64));
    f.write(std::string(64, '\xff').data(), 64);  // NaN bytes in the last moments
  }
  const test::RunResult r = mpirun(2, t.args("--micro-batch 2 --dp 2 --save-dir " + save + " --resume"));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("rank 1: checkpoint " + save + "/step-00000002: training_state.safetensors: expected"));
  EXPECT_THAT(r.err, HasSubstr("--resume-fallback"));
  EXPECT_EQ(count(r.err, "olmo2: error"), 1u) << r.err;
  EXPECT_EQ(r.out, "");  // no step was taken
}

}  // namespace
}  // namespace olmo2
