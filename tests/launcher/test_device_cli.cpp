// --device and --share-gpu (launcher/device_options.h): parsing, the refusal of a device
// this process cannot use — both refusals as pure functions, and the one this build and
// machine give through the binary, which exits 2 with one line — and the GPU of a
// node-local rank (docs/architecture.md §2, §4, §12).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "launcher/device_options.h"
#include "parallel/device_communicator.h"
#include "launcher/options.h"
#include "ops/device_runtime.h"
#include "tests/test_util.h"


namespace olmo2 {
namespace {

using ::testing::HasSubstr;

const std::string kModel = test::source_path("tests/golden/fixtures/mha-f32");

CliConfig parse(std::vector<std::string> args) {
  std::vector<const char*> argv{"olmo2"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

/// The usage error `args` give ("" and a failure when they parse).
std::string usage_error(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UsageError";
  return "";
}

TEST(DeviceOptions, DefaultIsTheCpuAndCudaIsParsedForEveryComputingSubcommand) {
  EXPECT_EQ(parse({"generate", "--model", kModel, "--prompt-ids", "1"}).device_options.device,
            Device::CPU);
  EXPECT_EQ(parse({"serve", "--model", kModel}).device_options.device, Device::CPU);
  const CliConfig g = parse(
      {"generate", "--model", kModel, "--prompt-ids", "1", "--device", "cuda", "--share-gpu"});
  EXPECT_EQ(g.device_options.device, Device::CUDA);
  EXPECT_TRUE(g.device_options.share_gpu);
  EXPECT_EQ(parse({"serve", "--model", kModel, "--device", "cuda"}).device_options.device,
            Device::CUDA);
  const std::vector<std::string> train = {"train",
                                          "--model-config",
                                          kModel + "/config.json",
                                          "--data",
                                          "x.npy",
                                          "--seq-len",
                                          "8",
                                          "--global-batch",
                                          "2",
                                          "--steps",
                                          "1"};
  EXPECT_EQ(parse(train).train.device, Device::CPU);
#ifdef OLMO2_HAVE_CUDA
  std::vector<std::string> on_gpu = train;
  on_gpu.insert(on_gpu.end(), {"--device", "cuda"});
  const CliConfig t = parse(on_gpu);
  EXPECT_EQ(t.train.device, Device::CUDA);  // the trainer's options carry it
  EXPECT_EQ(t.device_options.device, Device::CUDA);
#else
  std::vector<std::string> on_gpu = train;
  on_gpu.insert(on_gpu.end(), {"--device", "cuda"});
  EXPECT_THAT(usage_error(on_gpu), HasSubstr("this build has no CUDA backend"));
#endif
}

TEST(DeviceOptions, BadValuesAreUsageErrors) {
  EXPECT_THAT(usage_error({"generate", "--model", kModel, "--prompt-ids", "1", "--device", "tpu"}),
              HasSubstr("--device must be cpu or cuda, got \"tpu\""));
  EXPECT_THAT(usage_error({"serve", "--model", kModel, "--share-gpu"}),
              HasSubstr("--share-gpu needs --device cuda"));
  EXPECT_THAT(usage_error({"info", "--model", kModel, "--device", "cuda"}),
              HasSubstr("device"));  // not an info option
}

TEST(DeviceRefusal, NamesTheMissingBackendOrTheReasonThereIsNoGpu) {
  EXPECT_EQ(device_refusal(Device::CPU, false, 0, ""), "");
  EXPECT_EQ(device_refusal(Device::CUDA, true, 2, ""), "");
  EXPECT_THAT(device_refusal(Device::CUDA, false, 0, ""),
              HasSubstr("--device cuda: this build has no CUDA backend"));
  const std::string why =
      "cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is detected";
  EXPECT_EQ(device_refusal(Device::CUDA, true, 0, why),
            "--device cuda: no GPU is available to this process (" + why + ")");
}

TEST(GpuForLocalRank, TheLocalRanksOrdinalAmongThoseThisProcessSees) {
  for (int r = 0; r < 4; ++r) EXPECT_EQ(gpu_for_local_rank(r, 4, 4), r);
  EXPECT_EQ(gpu_for_local_rank(1, 2, 8), 1);  // fewer ranks than GPUs: the first ones
  for (int r = 0; r < 5; ++r) EXPECT_EQ(gpu_for_local_rank(r, 5, 2), r % 2);
  // A rank shown one GPU by its own CUDA_VISIBLE_DEVICES takes it, whatever its local rank.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(gpu_for_local_rank(r, 4, 1), 0);
  EXPECT_THAT(test::input_error([] { gpu_for_local_rank(0, 1, 0); }), HasSubstr("no GPU"));
  EXPECT_THAT(test::input_error([] { gpu_for_local_rank(2, 2, 4); }), HasSubstr("not in [0, 2)"));
}

// Sharing is decided by which physical GPU (PCI bus id) each rank uses, not by ordinals:
// per-rank CUDA_VISIBLE_DEVICES makes every rank "GPU 0" on GPUs of their own, and two
// ordinals may name one GPU under a reordered visibility.
TEST(GpuForLocalRank, SharingIsDecidedByTheGpusIdentity) {
  const std::vector<std::string> hosts = {"a", "a", "a", "b"};
  EXPECT_EQ(parallel::shared_gpu_refusal(hosts, {"0000:3B:00.0", "0000:5E:00.0", "0000:86:00.0", "0000:3B:00.0"}, false),
            "") << "distinct GPUs of one host, and the same bus id on another host";
  const std::string refused =
      parallel::shared_gpu_refusal(hosts, {"0000:3B:00.0", "0000:5E:00.0", "0000:3B:00.0", "0000:AF:00.0"}, false);
  EXPECT_THAT(refused, HasSubstr("ranks 0 and 2 on a would share GPU 0000:3B:00.0"));
  EXPECT_THAT(refused, HasSubstr("--share-gpu"));
  EXPECT_EQ(parallel::shared_gpu_refusal(hosts, {"x", "x", "x", "x"}, true), "") << "allowed with --share-gpu";
}

TEST(DeviceCli, CpuIsTheDefaultAndChangesNothing) {
  const auto r = test::run_olmo2("generate --model " + kModel +
                                 " --prompt-ids 1,2 --max-tokens 2 --format json");
  const auto d = test::run_olmo2("generate --model " + kModel +
                                 " --prompt-ids 1,2 --max-tokens 2 --format json --device cpu");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(r.out, d.out);
  EXPECT_EQ(d.err, "");
}

/// Where this process has no GPU (this build has no CUDA, or no device is visible),
/// `--device cuda` stops train, generate and serve at once: one line, status 2.
TEST(DeviceCli, CudaWithoutAGpuIsRefusedWithOneLineAndTheUsageStatus) {
  std::string why;
  if (ops::gpu_count(&why) > 0) GTEST_SKIP() << "this machine has a GPU: nothing to refuse";
  const std::vector<std::string> runs = {
      "generate --model " + kModel + " --prompt-ids 1,2 --device cuda",
      "serve --model " + kModel + " --device cuda --port 1",
      "train --model-config " + kModel +
          "/config.json --data none.npy --seq-len 8 --global-batch 1 --steps 1 "
          "--device cuda"};
  for (const std::string& args : runs) {
    const auto r = test::run_olmo2(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("olmo2: error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
#ifdef OLMO2_HAVE_CUDA
    EXPECT_THAT(r.err,
                HasSubstr("--device cuda: no GPU is available to this process (" + why + ")"))
        << args;
#else
    EXPECT_THAT(r.err, HasSubstr("--device cuda: this build has no CUDA backend")) << args;
#endif
  }
}

}  // namespace
}  // namespace olmo2
