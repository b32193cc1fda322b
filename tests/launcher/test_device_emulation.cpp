// `--device cuda` on the emulated device (OLMO2_DEVICE_EMULATION=1, set by ctest;
// ops/device_emulation.h; docs/architecture.md §2, §10): Device::CUDA tensors are host
// memory computed on by the CPU kernels, so every train, generate and serve run with
// --device cuda must equal the --device cpu run bit for bit — losses, grad norms, saved
// weights, generated tokens, log-probabilities. A difference is an integration bug above
// ops/ (host code touching device memory throws, as data_as does for a real device; a
// tensor on the wrong device throws in dispatch). Label unit (one process) and mpi
// (tp 2 and pp 2 under mpirun, collectives through the emulated device communicator).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "ops/device_emulation.h"
#include "ops/device_runtime.h"
#include "ops/elementwise.h"
#include "ops/tensor_ops.h"
#include "tests/launcher/serve_fixture.h"
#include "tests/launcher/tiny_model.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

/// Skips unless the device is emulated (the ctest entries set it; run by hand without it
/// there is nothing to compare).
#define REQUIRE_EMULATION() \
  if (!ops::device_emulated()) GTEST_SKIP() << "OLMO2_DEVICE_EMULATION=1 is not set"

/// mpirun with a session directory of this test process's own: Open MPI 4.1 creates
/// /tmp/ompi.HOST.UID with a check-then-mkdir, so two jobs of concurrent tests can race
/// ("A call to mkdir was unable to create the desired directory ... File exists").
std::string mpiexec() {
  static const std::string dir = [] {
    char name[] = "/tmp/olmo2-ompi-XXXXXX";
    const char* made = mkdtemp(name);
    return std::string(made ? made : "/tmp");
  }();
  return "env OMPI_MCA_orte_tmpdir_base=" + dir + " " + OLMO2_MPIEXEC;
}

test::RunResult mpirun(int np, const std::string& args) {
  return test::run_olmo2_with(mpiexec() + " -np " + std::to_string(np) +
                                  " --oversubscribe --allow-run-as-root " + OLMO2_BINARY,
                              args);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') v.push_back(json::parse(line));
  }
  return v;
}

// The emulation itself: one emulated GPU and a null stream; emulated views refuse host
// access as a real device's do, ops run on them, and views of two devices are refused.
// (On a machine without a GPU every CUDA runtime call fails, so the runs below passing
// also show that none is made.)
TEST(EmulatedDevice, ViewsRefuseHostAccessAndOpsComputeOnThem) {
  REQUIRE_EMULATION();
  EXPECT_EQ(ops::gpu_count(), 1);
  EXPECT_EQ(ops::gpu_description(0), "emulated GPU (host memory, OLMO2_DEVICE_EMULATION=1)");
  EXPECT_EQ(ops::default_stream(Device::CUDA).device, Device::CUDA);
  EXPECT_EQ(ops::default_stream(Device::CUDA).handle, nullptr);
  Tensor d = Tensor::zeros({2, 3}, DType::F32, Device::CUDA);
  EXPECT_THROW(d.view().f32(), ShapeError);
  EXPECT_THROW(d.view().data_as<float>(), ShapeError);
  ops::fill(d.view(), 2.0);
  Tensor h = Tensor::zeros({2, 3});
  h.view().f32()[4] = 1.5f;
  EXPECT_THROW(ops::add_inplace(d.view(), h.view(), DType::F32), ShapeError);  // two devices
  Tensor d2 = Tensor::zeros({2, 3}, DType::F32, Device::CUDA);
  ops::copy(h.view(), d2.view());
  ops::add_inplace(d.view(), d2.view(), DType::F32);
  ops::copy(d.view(), h.view());
  EXPECT_EQ(h.view().f32()[0], 2.0f);
  EXPECT_EQ(h.view().f32()[4], 3.5f);
}

/// A training run's step log and saved files: `launcher` "" (one process) or an mpirun.
struct TrainRun {
  std::vector<json> steps;
  std::string model, state;  ///< model.safetensors, training_state.safetensors
};

TrainRun train(const test::TinyModel& t, const std::string& device, const std::string& extra, int np = 1) {
  const std::string save = t.dir.file("run-" + device + "-" + std::to_string(np) + "-" +
                                      std::to_string(std::hash<std::string>{}(extra)));
  const std::string args = "train " + t.model_and_data() +
                           " --seq-len 16 --global-batch 8 --micro-batch 2 --steps 3 --lr 1e-2 "
                           "--warmup-steps 1 --threads 1 --log-format json --save-dir " +
                           save + " --device " + device + " " + extra;
  const test::RunResult r = np == 1 ? test::run_olmo2(args) : mpirun(np, args);
  EXPECT_EQ(r.status, 0) << args << ": " << r.err;
  TrainRun run;
  run.steps = json_lines(r.out);
  run.model = file_bytes(save + "/step-00000003/model.safetensors");
  run.state = file_bytes(save + "/step-00000003/training_state.safetensors");
  return run;
}

void expect_same_training(const TrainRun& got, const TrainRun& want, const std::string& what) {
  ASSERT_EQ(got.steps.size(), 3u) << what;
  ASSERT_EQ(want.steps.size(), 3u) << what;
  for (size_t k = 0; k < 3; ++k) {
    for (const char* key : {"loss", "z_loss", "grad_norm", "lr"}) {
      if (!want.steps[k].contains(key)) continue;
      EXPECT_EQ(got.steps[k][key], want.steps[k][key]) << what << " step " << k + 1 << " " << key;
    }
  }
  EXPECT_TRUE(got.model == want.model) << what << ": saved model weights differ";
  EXPECT_TRUE(got.state == want.state) << what << ": saved optimizer state differs";
}

class EmulatedTrain : public ::testing::TestWithParam<std::string> {};

TEST_P(EmulatedTrain, CudaEqualsCpuBitForBit) {
  REQUIRE_EMULATION();
  test::TinyModel t;
  const std::string extra = "--precision " + GetParam();
  expect_same_training(train(t, "cuda", extra), train(t, "cpu", extra), "train " + extra);
}

INSTANTIATE_TEST_SUITE_P(Precisions, EmulatedTrain, ::testing::Values("fp32", "bf16"),
                         [](const auto& info) { return info.param; });

std::string prompt_of(const std::string& fixture_dir) {
  std::ifstream in(fixture_dir + "/reference.json");
  const auto ref = json::parse(in);
  std::string prompt;
  for (int id : ref["prompt_ids"]) {
    if (!prompt.empty()) prompt.push_back(',');
    prompt.append(std::to_string(id));
  }
  return prompt;
}

TEST(EmulatedGenerate, CudaPrintsWhatCpuPrintsForEveryGoldenFixture) {
  REQUIRE_EMULATION();
  for (const char* fixture : {"mha-f32", "gqa-f32", "gqa-bf16", "deep-gqa-f32", "olmo3-mha-f32", "olmo3-gqa-f32",
                              "olmo3-gqa-bf16"}) {
    const std::string dir = test::source_path(std::string("tests/golden/fixtures/") + fixture);
    for (const char* precision : {"fp32", "bf16"}) {
      const std::string args = "generate --model " + dir + " --prompt-ids " + prompt_of(dir) +
                               " --max-tokens 8 --format json --precision " + precision;
      const auto cpu = test::run_olmo2(args + " --device cpu");
      const auto gpu = test::run_olmo2(args + " --device cuda");
      ASSERT_EQ(cpu.status, 0) << args << ": " << cpu.err;
      ASSERT_EQ(gpu.status, 0) << args << ": " << gpu.err;
      EXPECT_EQ(gpu.out, cpu.out) << fixture << " " << precision;
    }
  }
}

/// `olmo2 trace` of `dir`'s prompt reading a name of every kind (residual, heads first,
/// head rows, probabilities, MLP rows, vocab rows) with head 1 of layer 0 ablated (the tap
/// writes the change back to the device); and generate reading the layer outputs.
std::vector<std::string> traced_commands(const std::string& dir, const test::TempDir& tmp) {
  std::ofstream(tmp.file("prompts.jsonl")) << "{\"prompt_ids\": [" << prompt_of(dir) << "]}\n";
  const std::string reads =
      R"('["layers.*.layer_output", "layers.*.attention_keys", "layers.*.attention_premix", )"
      R"("layers.*.attention_probabilities", "layers.*.mlp_neurons", "logits"]')";
  return {"trace --model " + dir + " --prompts " + tmp.file("prompts.jsonl") + " --activations " + reads +
              R"( --interventions '[{"type": "ablate_head", "layer": 0, "head": 1}]')",
          "generate --model " + dir + " --prompt-ids " + prompt_of(dir) +
              R"( --max-tokens 4 --format json --activations '["layers.*.layer_output"]')"};
}

// Named activations (docs/architecture.md §13) read on the device are the CPU's bits.
TEST(EmulatedTrace, CudaReadsWhatCpuReads) {
  REQUIRE_EMULATION();
  for (const char* fixture : {"gqa-f32", "olmo3-gqa-f32"}) {
    test::TempDir tmp;
    const std::string dir = test::source_path(std::string("tests/golden/fixtures/") + fixture);
    for (const std::string& args : traced_commands(dir, tmp)) {
      const auto cpu = test::run_olmo2(args + " --device cpu");
      const auto gpu = test::run_olmo2(args + " --device cuda");
      ASSERT_EQ(cpu.status, 0) << args << ": " << cpu.err;
      ASSERT_EQ(gpu.status, 0) << args << ": " << gpu.err;
      EXPECT_THAT(cpu.out, ::testing::HasSubstr("\"activations\""));
      EXPECT_EQ(gpu.out, cpu.out) << args;
    }
  }
}

/// 12 greedy requests of 3 … 60 prompt ids and one text prompt, with log-probabilities.
std::vector<std::string> greedy_bodies() {
  std::mt19937 rng(5);
  std::vector<std::string> bodies;
  for (int i = 0; i < 12; ++i) {
    json ids = json::array();
    const int n = 3 + static_cast<int>(rng() % 58);
    for (int t = 0; t < n; ++t) ids.push_back(1000 + static_cast<int>(rng() % 40000));
    bodies.push_back(R"({"prompt":)" + ids.dump() +
                     R"(,"max_tokens":8,"temperature":0,"ignore_eos":true,"logprobs":0})");
  }
  bodies.push_back(R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0,"ignore_eos":true,"logprobs":0})");
  return bodies;
}

/// The choices of every body's answer, all sent at once (chunked prefills, pre-emption).
std::vector<json> together(const test::Server& server, const std::vector<std::string>& bodies) {
  std::vector<json> out(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = server.complete(bodies[i]).second["choices"]; });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(EmulatedServe, CudaAnswersEqualTheCpuServersInFp32AndBf16) {
  REQUIRE_EMULATION();
  static const test::ServeModel model;
  const std::vector<std::string> bodies = greedy_bodies();
  for (const char* precision : {"fp32", "bf16"}) {
    const std::string opts = std::string("--precision ") + precision +
                             " --kv-cache-memory 256KiB --max-batch-tokens 64";
    std::vector<json> want;
    {
      test::Server cpu(model.path, opts);
      for (const std::string& b : bodies) want.push_back(cpu.complete(b).second["choices"]);
    }
    test::Server gpu(model.path, opts + " --device cuda");
    EXPECT_THAT(gpu.log(), HasSubstr("emulated GPU"));
    for (size_t i = 0; i < bodies.size(); ++i) {
      EXPECT_EQ(gpu.complete(bodies[i]).second["choices"], want[i]) << precision << " request " << i;
    }
    const std::vector<json> batched = together(gpu, bodies);
    for (size_t i = 0; i < bodies.size(); ++i) {
      EXPECT_EQ(batched[i], want[i]) << precision << " request " << i << " batched";
    }
  }
}

// Under mpirun (label mpi): the layouts' device collectives go through the emulated
// device communicator; each --device cuda run equals the same layout on the CPU.
class EmulatedLayouts : public ::testing::TestWithParam<std::string> {};

TEST_P(EmulatedLayouts, TrainCudaEqualsCpuBitForBit) {
  REQUIRE_EMULATION();
  test::TinyModel t;
  const std::string layout = GetParam();
  expect_same_training(train(t, "cuda", layout + " --share-gpu", 2), train(t, "cpu", layout, 2), "train " + layout);
}

TEST_P(EmulatedLayouts, GenerateCudaPrintsWhatCpuPrints) {
  REQUIRE_EMULATION();
  for (const char* fixture : {"deep-gqa-f32", "gqa-bf16", "olmo3-gqa-f32"}) {
    const std::string dir = test::source_path(std::string("tests/golden/fixtures/") + fixture);
    const std::string args = "generate --model " + dir + " --prompt-ids " + prompt_of(dir) +
                             " --max-tokens 6 --format json " + GetParam();
    const auto cpu = mpirun(2, args + " --device cpu");
    const auto gpu = mpirun(2, args + " --device cuda --share-gpu");
    ASSERT_EQ(cpu.status, 0) << args << ": " << cpu.err;
    ASSERT_EQ(gpu.status, 0) << args << ": " << gpu.err;
    EXPECT_EQ(gpu.out, cpu.out) << fixture << " " << GetParam();
  }
}

TEST_P(EmulatedLayouts, TraceCudaReadsWhatCpuReads) {
  REQUIRE_EMULATION();
  test::TempDir tmp;
  for (const std::string& args : traced_commands(test::source_path("tests/golden/fixtures/olmo3-gqa-f32"), tmp)) {
    const auto cpu = mpirun(2, args + " --device cpu " + GetParam());
    const auto gpu = mpirun(2, args + " --device cuda --share-gpu " + GetParam());
    ASSERT_EQ(cpu.status, 0) << args << ": " << cpu.err;
    ASSERT_EQ(gpu.status, 0) << args << ": " << gpu.err;
    EXPECT_EQ(gpu.out, cpu.out) << args << " " << GetParam();
  }
}

TEST_P(EmulatedLayouts, ServeCudaAnswersEqualTheCpuServers) {
  REQUIRE_EMULATION();
  static const test::ServeModel model;
  const std::string launcher =
      mpiexec() + " -np 2 --oversubscribe --allow-run-as-root --bind-to none";
  const std::string opts = "--precision bf16 --max-batch-tokens 32 --max-running-requests 8 " + GetParam();
  const std::vector<std::string> bodies = greedy_bodies();
  std::vector<json> want;
  {
    test::Server cpu(model.path, opts, launcher);
    for (const std::string& b : bodies) want.push_back(cpu.complete(b).second["choices"]);
  }
  test::Server gpu(model.path, opts + " --device cuda --share-gpu", launcher);
  const std::vector<json> batched = together(gpu, bodies);
  for (size_t i = 0; i < bodies.size(); ++i) {
    EXPECT_EQ(batched[i], want[i]) << GetParam() << " request " << i << " batched";
  }
}

INSTANTIATE_TEST_SUITE_P(TpAndPp, EmulatedLayouts, ::testing::Values("--tp 2", "--pp 2"),
                         [](const auto& info) { return info.param == "--tp 2" ? std::string("tp2") : "pp2"; });

}  // namespace
}  // namespace olmo2
