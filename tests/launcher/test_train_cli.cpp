// `olmo2 train` end to end on a tiny model: exact resume, non-finite handling, the
// JSON log, and options refused before any work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ops/blas_core.h"
#include "runtime/model/model.h"
#include "runtime/io/npy.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;

/// A tiny OLMo 2 config.json and a token file of 4096 random ids in `dir`.
struct TinySetup {
  test::TempDir dir;
  TinySetup() {
    json c = {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 96},
              {"hidden_size", 32}, {"intermediate_size", 48}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
              {"eos_token_id", 95}, {"pad_token_id", 94}};
    std::ofstream(dir.file("config.json")) << c.dump(1);
    std::mt19937 rng(3);
    std::vector<uint32_t> ids(4096);
    // Mostly a learnable pattern (a cycle of 23 ids), some noise, an eos every 64.
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<uint32_t>(i % 64 == 0 ? 95 : rng() % 8 == 0 ? rng() % 90 : (i * 7) % 23);
    }
    NpyWriter w(dir.file("tokens.npy"));
    w.append(ids);
    w.close();
  }
  std::string base(const std::string& save = "", int seq_len = 16, int global_batch = 4) const {
    std::string a = "train --model-config " + dir.file("config.json") + " --data " + dir.file("tokens.npy") +
                    " --seq-len " + std::to_string(seq_len) + " --global-batch " + std::to_string(global_batch) +
                    " --micro-batch 2 --lr 1e-2 --warmup-steps 2 --threads 2";
    if (!save.empty()) a += " --save-dir " + save;
    return a;
  }
};

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) v.push_back(json::parse(line));
  return v;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(TrainCli, JsonLogHasEveryFieldAndTheLossFalls) {
  TinySetup s;
  const test::RunResult r = test::run_olmo2(s.base() + " --steps 12 --log-format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<json> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 12u);
  for (const char* key : {"step", "loss", "z_loss", "grad_norm", "lr", "tokens", "tokens_per_second"}) {
    EXPECT_TRUE(lines[0].contains(key)) << key;
  }
  EXPECT_EQ(lines[11]["step"], 12);
  EXPECT_EQ(lines[11]["tokens"], 12 * 4 * 16);
  EXPECT_NEAR(lines[0]["loss"].get<double>(), std::log(96.0), 0.2);  // uniform at init
  EXPECT_LT(lines[11]["loss"].get<double>(), lines[0]["loss"].get<double>() - 1.0);
  EXPECT_NEAR(lines[0]["lr"].get<double>(), 5e-3, 1e-12);  // warm-up step 1 of 2
  EXPECT_THAT(r.err, HasSubstr("step 12/12"));
}

// Resume: 6 steps straight vs 3 steps, save, resume, 3 more. Same thread count and
// deterministic kernels, so the losses and the final weights are bitwise equal.
TEST(TrainCli, ResumeContinuesTheExactSameRun) {
  TinySetup s;
  const std::string a = s.dir.file("a"), b = s.dir.file("b");
  const test::RunResult full = test::run_olmo2(s.base(a) + " --steps 6 --log-format json");
  ASSERT_EQ(full.status, 0) << full.err;
  const test::RunResult first = test::run_olmo2(s.base(b) + " --steps 6 --save-interval 3 --log-format json "
                                                             "--debug-stop-after 3");
  ASSERT_EQ(first.status, 75) << "stopped early with a checkpoint: " << first.err;
  ASSERT_TRUE(fs::exists(b + "/step-00000003/model.safetensors"));
  ASSERT_FALSE(fs::exists(b + "/step-00000006"));
  const test::RunResult second = test::run_olmo2(s.base(b) + " --steps 6 --resume --log-format json");
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_THAT(second.err, HasSubstr("resumed from"));
  const std::vector<json> f = json_lines(full.out), p1 = json_lines(first.out), p2 = json_lines(second.out);
  ASSERT_EQ(f.size(), 6u);
  ASSERT_EQ(p1.size(), 3u);
  ASSERT_EQ(p2.size(), 3u);
  for (int i = 0; i < 6; ++i) {
    const json& got = i < 3 ? p1[i] : p2[i - 3];
    EXPECT_EQ(got["step"], f[i]["step"]);
    EXPECT_EQ(got["loss"].get<double>(), f[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(got["grad_norm"].get<double>(), f[i]["grad_norm"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(got["lr"].get<double>(), f[i]["lr"].get<double>());
  }
  EXPECT_EQ(slurp(a + "/step-00000006/model.safetensors"), slurp(b + "/step-00000006/model.safetensors"));
  EXPECT_EQ(slurp(a + "/step-00000006/training_state.safetensors"),
            slurp(b + "/step-00000006/training_state.safetensors"));
}

// --precision bf16 (docs/architecture.md §3.2): the loss falls as in fp32 but not to the
// same bits; a resumed run continues exactly (the master weights and moments are saved in
// f32 and the bf16 compute copy is made from them again); the checkpoint is f32.
TEST(TrainCli, Bf16TrainsResumesExactlyAndSavesF32MasterWeights) {
  TinySetup s;
  const std::string a = s.dir.file("a"), b = s.dir.file("b");
  const test::RunResult fp32 = test::run_olmo2(s.base() + " --steps 6 --log-format json");
  const test::RunResult full = test::run_olmo2(s.base(a) + " --steps 6 --log-format json --precision bf16");
  ASSERT_EQ(full.status, 0) << full.err;
  ASSERT_EQ(fp32.status, 0) << fp32.err;
  // The f32 products run on OpenBLAS kernels this CPU can use (the binary asks for them
  // when OpenBLAS falls back to generic ones, as this test process shows it would).
  const std::string want = blas_core_upgrade();
  EXPECT_THAT(full.err, HasSubstr("; OpenBLAS " + (want.empty() ? blas_core_name() : want) + " kernels"));
  EXPECT_THAT(full.err, ::testing::ContainsRegex("bf16 \\(f32 master weights, (avx512bf16|avx2|portable|onednn \\([a-z0-9_]+\\)) bf16 products\\)"));
  const std::vector<json> f = json_lines(full.out), g = json_lines(fp32.out);
  ASSERT_EQ(f.size(), 6u);
  EXPECT_LT(f[5]["loss"].get<double>(), f[0]["loss"].get<double>() - 0.5);
  EXPECT_NEAR(f[5]["loss"].get<double>(), g[5]["loss"].get<double>(), 0.1);
  EXPECT_NE(f[5]["loss"].get<double>(), g[5]["loss"].get<double>());  // bf16 compute is not fp32's
  const test::RunResult first = test::run_olmo2(s.base(b) + " --steps 6 --save-interval 3 --log-format json "
                                                             "--debug-stop-after 3 --precision bf16");
  ASSERT_EQ(first.status, 75) << first.err;
  const test::RunResult second = test::run_olmo2(s.base(b) + " --steps 6 --resume --log-format json --precision bf16");
  ASSERT_EQ(second.status, 0) << second.err;
  const std::vector<json> p2 = json_lines(second.out);
  ASSERT_EQ(p2.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p2[i]["loss"].get<double>(), f[i + 3]["loss"].get<double>()) << i;
  EXPECT_EQ(slurp(a + "/step-00000006/model.safetensors"), slurp(b + "/step-00000006/model.safetensors"));
  const json cfg = json::parse(slurp(a + "/step-00000006/config.json"));
  EXPECT_EQ(cfg.value("torch_dtype", cfg.value("dtype", std::string())), "float32");
  EXPECT_EQ(json::parse(slurp(a + "/step-00000006/training_state.json"))["state"]["precision"], "bf16");
  // Resuming in another precision says so.
  const test::RunResult other = test::run_olmo2(s.base(b) + " --steps 7 --resume --log-format json");
  ASSERT_EQ(other.status, 0) << other.err;
  EXPECT_THAT(other.err, HasSubstr("note: precision differs from the checkpoint's (\"bf16\" -> \"fp32\")"));
}

// A resumed run keeps writing the tokenizer of the run it continues (the checkpoint it
// came from may be pruned meanwhile) and says which hyper-parameters changed.
TEST(TrainCli, ResumeCarriesTheTokenizerAndNotesChangedHyperParameters) {
  TinySetup s;
  std::string tok = test::source_path("data/dolma2-tokenizer.json");
  if (!fs::exists(tok)) tok = test::source_path("../shared/data/dolma2-tokenizer.json");
  // The dolma2 vocabulary (100278 ids) needs a model at least that wide: a thin one.
  json c = json::parse(slurp(s.dir.file("config.json")));
  c["vocab_size"] = 100352, c["hidden_size"] = 8, c["intermediate_size"] = 8, c["num_hidden_layers"] = 1;
  c["num_attention_heads"] = 2, c["num_key_value_heads"] = 2;
  c["eos_token_id"] = 100257, c["pad_token_id"] = 100277;  // the tokenizer's own (a run checks its EOS)
  std::ofstream(s.dir.file("wide.json")) << c.dump();
  const std::string d = s.dir.file("run");
  const std::string base = "train --model-config " + s.dir.file("wide.json") + " --data " + s.dir.file("tokens.npy") +
                           " --seq-len 16 --global-batch 2 --threads 2 --keep 1 --save-dir " + d;
  ASSERT_EQ(test::run_olmo2(base + " --steps 2 --tokenizer " + tok).status, 0);
  ASSERT_TRUE(fs::exists(d + "/step-00000002/tokenizer.json"));
  const test::RunResult r3 = test::run_olmo2(base + " --steps 3 --resume --z-loss 1e-3");
  ASSERT_EQ(r3.status, 0) << r3.err;
  EXPECT_THAT(r3.err, HasSubstr("note: schedule differs from the checkpoint's"));  // --steps 2 -> 3
  EXPECT_THAT(r3.err, HasSubstr("note: z_loss differs from the checkpoint's (1e-05 -> 0.001)"));
  EXPECT_TRUE(fs::exists(d + "/step-00000003/tokenizer.json"));
  EXPECT_FALSE(fs::exists(d + "/step-00000002")) << "--keep 1";
  ASSERT_EQ(test::run_olmo2(base + " --steps 4 --resume --z-loss 1e-3").status, 0);
  EXPECT_EQ(slurp(d + "/step-00000004/tokenizer.json"), slurp(tok));
}

TEST(TrainCli, ResumeRefusesAnotherModelOrDataOrder) {
  TinySetup s;
  const std::string d = s.dir.file("ckpt");
  ASSERT_EQ(test::run_olmo2(s.base(d) + " --steps 2").status, 0);
  json c = json::parse(slurp(s.dir.file("config.json")));
  c["hidden_size"] = 48;
  std::ofstream(s.dir.file("other.json")) << c.dump();
  const std::string args = "train --model-config " + s.dir.file("other.json") + " --data " + s.dir.file("tokens.npy") +
                           " --seq-len 16 --global-batch 4 --micro-batch 2 --steps 4 --save-dir " + d + " --resume";
  const test::RunResult r = test::run_olmo2(args);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("hidden_size is 32 but"));
  const test::RunResult seq = test::run_olmo2(s.base(d, 8) + " --steps 4 --resume");
  EXPECT_EQ(seq.status, 1);
  EXPECT_THAT(seq.err, HasSubstr("seq_len"));
  EXPECT_TRUE(fs::exists(d + "/step-00000002/model.safetensors"));
}

// A checkpoint records its data (each file's path, token count and XXH3-128, in order):
// a resume on the same files in another order, on another file of the same length, or
// on a file whose tokens changed is refused naming the file; --data-changed ok goes on,
// saying so. The same files at another path resume as before.
TEST(TrainCli, ResumeRunsOnTheDataItWasTrainedOn) {
  TinySetup s;
  // Two halves of the token file as two files, and a third of the same length as the second.
  std::vector<uint32_t> all(4096);
  NpyFile(s.dir.file("tokens.npy")).read(0, std::span<uint32_t>(all));
  auto write = [&](const std::string& name, std::vector<uint32_t> ids) {
    NpyWriter w(s.dir.file(name));
    w.append(ids);
    w.close();
  };
  write("a.npy", std::vector<uint32_t>(all.begin(), all.begin() + 2048));
  write("b.npy", std::vector<uint32_t>(all.begin() + 2048, all.end()));
  std::vector<uint32_t> other(all.begin() + 2048, all.end());
  other[100] = (other[100] + 1) % 90;
  write("c.npy", other);
  const std::string cfg = "train --model-config " + s.dir.file("config.json") +
                          " --seq-len 16 --global-batch 4 --micro-batch 2 --lr 1e-2 --warmup-steps 2 --threads 2";
  const std::string d = s.dir.file("ckpt");
  auto data = [&](const std::string& a, const std::string& b) { return " --data " + s.dir.file(a) + " " + s.dir.file(b); };
  ASSERT_EQ(test::run_olmo2(cfg + data("a.npy", "b.npy") + " --steps 2 --save-dir " + d).status, 0);
  const json state = json::parse(slurp(d + "/step-00000002/training_state.json")).at("state");
  ASSERT_TRUE(state.contains("data_files")) << state.dump();
  ASSERT_EQ(state["data_files"].size(), 2u) << state.dump();
  EXPECT_EQ(state["data_files"][1]["path"], s.dir.file("b.npy"));
  EXPECT_EQ(state["data_files"][1]["tokens"], 2048);
  EXPECT_EQ(state["data_files"][1]["xxh3"].get<std::string>().size(), 32u);
  const std::string resume = " --steps 4 --save-dir " + d + " --resume auto";
  const test::RunResult swapped = test::run_olmo2(cfg + data("b.npy", "a.npy") + resume);
  EXPECT_EQ(swapped.status, 1) << swapped.err;
  EXPECT_THAT(swapped.err, HasSubstr("file 1 of --data, " + s.dir.file("b.npy") +
                                     ", was file 2 of the checkpoint's run (its order: " + s.dir.file("a.npy") + ", " +
                                     s.dir.file("b.npy") + ")"));
  const test::RunResult changed = test::run_olmo2(cfg + data("a.npy", "c.npy") + resume);
  EXPECT_EQ(changed.status, 1) << changed.err;
  EXPECT_THAT(changed.err, HasSubstr("file 2 of --data, " + s.dir.file("c.npy") + " (2048 tokens, xxh3 "));
  EXPECT_THAT(changed.err, HasSubstr("is not the checkpoint's file 2, " + s.dir.file("b.npy") + " (2048 tokens"));
  EXPECT_THAT(changed.err, HasSubstr("give --data-changed ok"));
  const test::RunResult fewer = test::run_olmo2(cfg + " --data " + s.dir.file("tokens.npy") + resume);
  EXPECT_EQ(fewer.status, 1);
  EXPECT_THAT(fewer.err, HasSubstr("the checkpoint's run read 2 files"));
  EXPECT_FALSE(fs::exists(d + "/step-00000003")) << "a refused resume trained";
  // Allowed on request, and said.
  const test::RunResult ok = test::run_olmo2(cfg + data("a.npy", "c.npy") + resume + " --data-changed ok");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_THAT(ok.err, HasSubstr("note: --data-changed ok: file 2 of --data"));
  EXPECT_THAT(ok.err, HasSubstr("the data order goes on from the checkpoint's position"));
  // The same files under other paths: the same data.
  fs::create_directories(s.dir.file("moved"));
  fs::copy_file(s.dir.file("a.npy"), s.dir.file("moved/a.npy"));
  fs::copy_file(s.dir.file("b.npy"), s.dir.file("moved/b.npy"));
  const std::string d2 = s.dir.file("ckpt2");
  ASSERT_EQ(test::run_olmo2(cfg + data("a.npy", "b.npy") + " --steps 2 --save-dir " + d2).status, 0);
  const test::RunResult moved = test::run_olmo2(cfg + data("moved/a.npy", "moved/b.npy") + " --steps 4 --save-dir " +
                                                d2 + " --resume auto");
  EXPECT_EQ(moved.status, 0) << moved.err;
  EXPECT_THAT(moved.err, ::testing::Not(HasSubstr("data")));
  const test::RunResult bad = test::run_olmo2(cfg + data("a.npy", "b.npy") + resume + " --data-changed yes");
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.err, HasSubstr("--data-changed must be ok"));
}

// A resume that changes only the micro-batch reshards nothing, and says so.
TEST(TrainCli, AResumeWithAnotherMicroBatchSaysWhatChanged) {
  TinySetup s;
  const std::string d = s.dir.file("ckpt");
  ASSERT_EQ(test::run_olmo2(s.base(d) + " --steps 2").status, 0);
  std::string args = s.base(d);
  args.replace(args.find("--micro-batch 2"), 15, "--micro-batch 1");
  const test::RunResult one = test::run_olmo2(args + " --steps 4 --resume auto");
  EXPECT_EQ(one.status, 0) << one.err;
  EXPECT_THAT(one.err, HasSubstr("note: resuming a run of micro-batch 2 with micro-batch 1"));
  EXPECT_THAT(one.err, HasSubstr("the weights and optimizer state load as saved"));
  EXPECT_THAT(one.err, ::testing::Not(HasSubstr("resharded")));
}

// An INI file cannot include another: `config = other.ini` is refused naming the line
// (it used to be ignored, and the run then failed for the options it held).
TEST(TrainCli, AConfigFileNamingAnotherIsRefused) {
  TinySetup s;
  std::ofstream(s.dir.file("other.ini")) << "seq-len = 16\n";
  std::ofstream(s.dir.file("main.ini")) << "# options\nsteps = 2\n  config = " << s.dir.file("other.ini") << "\n";
  const test::RunResult r = test::run_olmo2("train --config " + s.dir.file("main.ini") + " --model-config " +
                                            s.dir.file("config.json") + " --data " + s.dir.file("tokens.npy") +
                                            " --global-batch 4");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "olmo2: error: --config " + s.dir.file("main.ini") + ": line 3 names another config file (config = " +
                       s.dir.file("other.ini") + "); config files do not include others: give its options in this "
                       "file, or that file as --config\n");
}

TEST(TrainCli, NonFiniteLossSkipsTheUpdate) {
  TinySetup s;
  const std::string d = s.dir.file("ckpt");
  const test::RunResult r =
      test::run_olmo2(s.base(d) + " --steps 3 --save-interval 1 --keep 0 --log-format json --debug-scale-loss 2:nan");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<json> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_FALSE(lines[0]["skipped"].get<bool>());
  EXPECT_TRUE(lines[1]["skipped"].get<bool>());
  EXPECT_FALSE(lines[2]["skipped"].get<bool>());
  EXPECT_THAT(r.err, HasSubstr("SKIPPED"));
  // The weights after the skipped step are those of step 1.
  EXPECT_EQ(slurp(d + "/step-00000001/model.safetensors"), slurp(d + "/step-00000002/model.safetensors"));
  EXPECT_NE(slurp(d + "/step-00000002/model.safetensors"), slurp(d + "/step-00000003/model.safetensors"));
  const json st = json::parse(slurp(d + "/step-00000003/training_state.json"));
  EXPECT_EQ(st["state"]["skipped_steps"], 1);
  EXPECT_EQ(st["state"]["optimizer_steps"], 2);
}

TEST(TrainCli, NonFiniteLossCanStopTheRun) {
  TinySetup s;
  const std::string d = s.dir.file("ckpt");
  const test::RunResult r =
      test::run_olmo2(s.base(d) + " --steps 4 --save-interval 1 --on-nonfinite stop --debug-scale-loss 3:inf");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("step 3: non-finite loss"));
  EXPECT_TRUE(fs::exists(d + "/step-00000002"));
  EXPECT_FALSE(fs::exists(d + "/step-00000003"));
}

TEST(TrainCli, InconsistentOptionsAreRefusedBeforeAnyWork) {
  TinySetup s;
  const std::string d = s.dir.file("never");
  struct Bad {
    std::string args, message;
  };
  const Bad cases[] = {
      {s.base(d, 16, 5) + " --steps 2", "--global-batch 5 is not divisible by --micro-batch 2"},
      {s.base(d, 65) + " --steps 2", "--seq-len 65 exceeds the model's context"},
      {"train --model-config " + s.dir.file("config.json") + " --data " + s.dir.file("missing.npy") +
           " --seq-len 16 --global-batch 4 --steps 2 --save-dir " + d,
       "missing.npy"},
      {s.base(d) + " --steps 2 --model " + s.dir.path(), "exactly one of --model"},
      {s.base(d) + " --steps 0", "--steps must be at least 1"},
      {s.base(d) + " --steps 2 --schedule cosin", "cosin"},
      {s.base(d) + " --steps 2 --warmup-steps 3", "warm"},
      {s.base(d, 16, 4096) + " --steps 2", "global batch 4096 is larger than the 256 windows"},
      {s.base(d) + " --steps 2 --precision fp16", "--precision must be fp32 or bf16, got \"fp16\""},
      {s.base(d) + " --steps 2 --metrics-port -1", "--metrics-port must be a TCP port (1-65535, or 0: any free one), got -1"},
      {s.base(d) + " --steps 2 --port-file " + s.dir.file("p"), "--port-file " + s.dir.file("p") +
                                                                   " names where the metrics port goes: give --metrics-port too"},
      {s.base(d) + " --steps 2 --metrics-port 0 --port-file /nonexistent/p", "--port-file /nonexistent/p: no folder /nonexistent"},
  };
  for (const Bad& b : cases) {
    const test::RunResult r = test::run_olmo2(b.args);
    EXPECT_NE(r.status, 0) << b.args;
    EXPECT_THAT(r.err, HasSubstr(b.message)) << b.args;
    EXPECT_FALSE(fs::exists(d)) << "a refused run wrote " << d;
  }
}

/// Starts `olmo2 ARGS --log-format json` in the background, sends `sig` once the first
/// step is logged, and returns the exit status, stdout and stderr.
test::RunResult stop_with(int sig, const std::string& args, const test::TempDir& dir) {
  const std::string out = dir.file("stop.out"), err = dir.file("stop.err");
  fs::remove(out);  // the wait below must see this run's first step, not an earlier run's
  const std::string script = std::string(OLMO2_BINARY) + " " + args + " --log-format json >" + out + " 2>" + err +
                             " & pid=$!; while [ ! -s " + out + " ]; do sleep 0.05; done; kill -" +
                             std::to_string(sig) + " $pid; wait $pid";
  const int raw = std::system(("bash -c '" + script + "'").c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : 128, slurp(out), slurp(err)};
}

// SIGTERM (Slurm's pre-emption signal) and SIGUSR1 stop after the current step with a
// checkpoint and exit 75 ("stopped early, requeue me"); `--resume auto` then finishes
// the run with 0. Without --save-dir a stop has nothing to resume: status 1.
// (docs/architecture.md §12 "Exit status")
TEST(TrainCli, AStopSignalSavesAndExits75ThenTheResumeFinishes) {
  TinySetup s;
  for (const int sig : {SIGTERM, SIGUSR1}) {
    const std::string d = s.dir.file("ckpt" + std::to_string(sig));
    const test::RunResult r = stop_with(sig, s.base(d) + " --steps 100000", s.dir);
    EXPECT_EQ(r.status, 75) << "signal " << sig << ": " << r.err;
    const std::vector<json> lines = json_lines(r.out);
    ASSERT_FALSE(lines.empty());
    const int64_t last = lines.back()["step"].get<int64_t>();
    EXPECT_LT(last, 100000);
    char name[32];
    std::snprintf(name, sizeof name, "/step-%08lld", static_cast<long long>(last));
    EXPECT_TRUE(fs::exists(d + name + "/training_state.json")) << d + name;
    EXPECT_THAT(r.err, HasSubstr("stop requested: stopped after step " + std::to_string(last) +
                                 " (checkpoint written)"));
    if (sig != SIGUSR1) continue;
    const test::RunResult resumed =
        test::run_olmo2(s.base(d) + " --steps " + std::to_string(last + 2) + " --resume auto --log-format json");
    EXPECT_EQ(resumed.status, 0) << resumed.err;
    EXPECT_THAT(resumed.err, HasSubstr("resumed from " + d + name + " at step " + std::to_string(last)));
    EXPECT_EQ(json_lines(resumed.out).size(), 2u);
    std::snprintf(name, sizeof name, "/step-%08lld", static_cast<long long>(last + 2));
    EXPECT_TRUE(fs::exists(d + name + "/training_state.json")) << d + name;
  }
  const test::RunResult unsaved = stop_with(SIGUSR1, s.base() + " --steps 100000", s.dir);
  EXPECT_EQ(unsaved.status, 1) << unsaved.err;
  const std::vector<json> lines = json_lines(unsaved.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(unsaved.err, HasSubstr("olmo2: error: stopped at step " + std::to_string(lines.back()["step"].get<int64_t>()) +
                                     " without a checkpoint (no --save-dir)"));
}

// The save directory is checked before step 1: writable, not shared with a running
// job, and not holding another run's checkpoints (which a fresh run would overwrite).
TEST(TrainCli, SaveDirectoryIsCheckedBeforeTraining) {
  TinySetup s;
  const std::string d = s.dir.file("ckpt");
  ASSERT_EQ(test::run_olmo2(s.base(d) + " --steps 2").status, 0);
  const std::string before = slurp(d + "/step-00000002/model.safetensors");
  const test::RunResult fresh = test::run_olmo2(s.base(d) + " --steps 3 --log-format json");
  EXPECT_EQ(fresh.status, 1);
  EXPECT_THAT(fresh.err, HasSubstr("already holds checkpoints of another run"));
  EXPECT_EQ(fresh.out, "");
  EXPECT_EQ(slurp(d + "/step-00000002/model.safetensors"), before);

  const test::RunResult under_file = test::run_olmo2(s.base(s.dir.file("tokens.npy") + "/sub") + " --steps 2 --log-format json");
  EXPECT_EQ(under_file.status, 1);
  EXPECT_THAT(under_file.err, HasSubstr("cannot create the directory"));
  EXPECT_EQ(under_file.out, "") << "refused before any step";

  // --resume given the save directory instead of a checkpoint: said so, with both fixes.
  const test::RunResult save_dir_as_checkpoint = test::run_olmo2(s.base(d) + " --steps 3 --resume " + d);
  EXPECT_EQ(save_dir_as_checkpoint.status, 1);
  EXPECT_THAT(save_dir_as_checkpoint.err,
              HasSubstr("--resume " + d + " is a save directory, not a checkpoint (it holds 1 checkpoint, the newest " + d +
                        "/step-00000002): give --resume " + d + "/step-00000002, or --save-dir " + d + " --resume auto"));
  // A save directory whose step folder is a symlink to another run's checkpoint resumes
  // (the step's folder is the save directory, wherever the link points).
  const std::string linked = s.dir.file("linked");
  fs::create_directories(linked);
  fs::create_directory_symlink(d + "/step-00000002", linked + "/step-00000002");
  const test::RunResult via_link = test::run_olmo2(s.base(linked) + " --steps 3 --resume auto");
  EXPECT_EQ(via_link.status, 0) << via_link.err;
  EXPECT_TRUE(fs::exists(linked + "/step-00000003/training_state.json"));

  // Another process holds the lock.
  const std::string other = s.dir.file("other");
  fs::create_directories(other);
  const int fd = ::open((other + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const test::RunResult locked = test::run_olmo2(s.base(other) + " --steps 2");
  EXPECT_EQ(locked.status, 1);
  EXPECT_THAT(locked.err, HasSubstr("is in use by another olmo2 train"));
  ::close(fd);
  EXPECT_EQ(test::run_olmo2(s.base(other) + " --steps 2").status, 0) << "the lock is released with its holder";

  const test::RunResult done = test::run_olmo2(s.base(d) + " --steps 2 --resume");
  EXPECT_EQ(done.status, 1);
  EXPECT_THAT(done.err, HasSubstr("nothing to do"));
}

TEST(TrainCli, BadTokenIdsAndMissingRanksAreRefusedUpFront) {
  TinySetup s;
  {
    std::vector<uint32_t> ids(4096, 5);
    ids[4000] = 96;  // = vocab_size, far from the first batches
    NpyWriter w(s.dir.file("bad.npy"));
    w.append(ids);
    w.close();
  }
  const test::RunResult bad = test::run_olmo2("train --model-config " + s.dir.file("config.json") + " --data " +
                                              s.dir.file("bad.npy") + " --seq-len 16 --global-batch 4 --steps 1");
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("token at offset 4000 has id 96, not below vocab_size 96"));
  // A layout needs its ranks: without mpirun there is one.
  const test::RunResult mpi = test::run_olmo2(s.base() + " --steps 2 --tp 2");
  EXPECT_EQ(mpi.status, 1);
  EXPECT_THAT(mpi.err, HasSubstr("world 1 is not divisible by tp 2"));
}

// A loss spike injected into a real run (step 20's loss and gradients × 30) is
// detected once, logged as one structured event, and with --skip-spikes that step's
// update is not applied: the weights after step 20 are those after step 19.
TEST(TrainCli, InjectedLossSpikeIsDetectedAndCanBeSkipped) {
  TinySetup s;
  const std::string args = " --steps 22 --spike-window 16 --log-format json --debug-scale-loss 20:30 --save-interval 1 --keep 0";
  for (const bool skip : {false, true}) {
    const std::string d = s.dir.file(skip ? "skip" : "keep");
    const test::RunResult r = test::run_olmo2(s.base(d) + args + (skip ? " --skip-spikes" : ""));
    ASSERT_EQ(r.status, 0) << r.err;
    int loss_spikes = 0;
    for (const json& j : json_lines(r.out)) {
      if (!j["loss_spike"].get<bool>()) continue;
      ++loss_spikes;
      EXPECT_EQ(j["step"], 20);
      EXPECT_EQ(j["skipped"].get<bool>(), skip);
    }
    EXPECT_EQ(loss_spikes, 1) << r.out;
    EXPECT_THAT(r.err, HasSubstr("{\"event\":\"spike\""));
    EXPECT_THAT(r.err, HasSubstr("\"signal\":\"loss\""));
    const bool same = slurp(d + "/step-00000019/model.safetensors") == slurp(d + "/step-00000020/model.safetensors");
    EXPECT_EQ(same, skip) << (skip ? "a skipped spike changed the weights" : "step 20 was not applied");
    // The window is in the checkpoint: a resume continues the same detector.
    const json st = json::parse(slurp(d + "/step-00000022/training_state.json"));
    EXPECT_EQ(st["state"]["spike_detector"]["loss"]["spikes"], 1);
    EXPECT_EQ(st["state"]["spike_detector"]["loss"]["values"].size(), 16u);
  }
}

// The recipe's knobs reach the run: schedule shape, Z-loss coefficient, weight decay.
TEST(TrainCli, ScheduleZLossAndWeightDecayOptionsTakeEffect) {
  TinySetup s;
  auto lines = [&](const std::string& extra) {
    const test::RunResult r = test::run_olmo2(s.base() + " --steps 4 --log-format json" + extra);
    EXPECT_EQ(r.status, 0) << r.err;
    return json_lines(r.out);
  };
  // base(): lr 1e-2, warm-up 2 of 4 steps.
  const std::vector<json> constant = lines(" --schedule constant");
  EXPECT_DOUBLE_EQ(constant[3]["lr"].get<double>(), 1e-2);
  const std::vector<json> linear = lines(" --schedule linear --min-lr-ratio 0.5");
  EXPECT_NEAR(linear[3]["lr"].get<double>(), 1e-2 - 0.5e-2 * 0.5, 1e-12);  // progress (3-2)/(4-2)
  const std::vector<json> no_z = lines(" --z-loss 0");
  EXPECT_EQ(no_z[0]["z_loss"].get<double>(), 0.0);
  const std::vector<json> big_z = lines(" --z-loss 0.1");
  EXPECT_NEAR(big_z[0]["z_loss"].get<double>() / 0.1, std::pow(std::log(96.0), 2), 1.0);  // lse ≈ ln V at init
  const std::vector<json> decay = lines(" --weight-decay 0");
  EXPECT_EQ(decay[0]["loss"].get<double>(), constant[0]["loss"].get<double>());  // same first step
  EXPECT_NE(decay[3]["loss"].get<double>(), lines("")[3]["loss"].get<double>());  // decay changes the weights
}

TEST(TrainCli, OptionsFromAnIniFile) {
  TinySetup s;
  std::ofstream(s.dir.file("train.ini")) << "model-config = " << s.dir.file("config.json") << "\ndata = "
                                         << s.dir.file("tokens.npy") << "\nseq-len = 16\nglobal-batch = 4\n"
                                         << "steps = 2\nlog-format = json\n";
  const test::RunResult r = test::run_olmo2("train --config " + s.dir.file("train.ini") + " --steps 3");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json_lines(r.out).size(), 3u);  // the command line wins
}

}  // namespace
}  // namespace olmo2

namespace olmo2 {
namespace {

// docs/architecture.md §7 "Shared storage": one process writes and removes the probe too,
// so a --save-dir it cannot write is refused before step 1, not at the first save after
// --save-interval steps of work. Root writes anywhere: the run is made as `nobody`.
TEST(TrainCli, AnUnwritableSaveDirIsRefusedBeforeTheFirstStep) {
  if (::geteuid() != 0 || std::system("command -v runuser > /dev/null") != 0) {
    GTEST_SKIP() << "needs root and runuser to run olmo2 as another user";
  }
  TinySetup t;
  const std::string ro = t.dir.file("ro");
  std::filesystem::create_directories(ro);
  std::filesystem::permissions(t.dir.path(), std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                                 std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                                 std::filesystem::perms::others_exec);
  std::filesystem::permissions(ro, std::filesystem::perms::owner_all | std::filesystem::perms::others_read |
                                       std::filesystem::perms::others_exec);
  if (std::system(("runuser -u nobody -- " + std::string(OLMO2_BINARY) + " --help > /dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "user nobody cannot run " << OLMO2_BINARY << " (its folders are not world-readable)";
  }
  const test::RunResult r = test::run_olmo2_with("runuser -u nobody -- " + std::string(OLMO2_BINARY),
                                                 t.base(ro) + " --steps 50 --save-interval 25 --log-format json");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--save-dir " + ro + ": cannot write " + ro + "/.olmo2-probe-"));
  EXPECT_THAT(r.err, HasSubstr("Permission denied"));
  EXPECT_EQ(r.out, "") << "no step was taken";
}

}  // namespace
}  // namespace olmo2
