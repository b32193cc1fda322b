// Training on the GPU (TrainOptions::device = CUDA; docs/architecture.md §2, §7) against
// the CPU: 10 steps of the golden fixtures' run (tests/golden/bf16_train_fixture.h) in
// fp32 follow the CPU run's losses and grad norms, in bf16 mixed precision the PyTorch
// reference within the bounds the CPU run is held to; checkpoints move between devices
// (a CPU checkpoint resumes on the GPU and the reverse, same files). Label gpu: every
// test skips, saying why, without a GPU; also run on the emulated device (label unit,
// OLMO2_DEVICE_EMULATION=1, docs/architecture.md §10).
#include <gtest/gtest.h>

#include <cstdio>

#include "ops/tensor_ops.h"
#include "runtime/train/trainer.h"
#include "tests/golden/bf16_train_fixture.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using test::Bf16TrainReference;

/// fp32 on the GPU against fp32 on the CPU, both relative. The two sum the products,
/// norms and reductions in different orders (cuBLAS vs OpenBLAS, other reduction trees),
/// each rounding differently in the last bits of f32 (2^-24 relative); over 10 steps
/// AdamW's m/√v turns such differences of near-zero gradient elements into update
/// differences (the drift tests/train/trajectory_bounds.h measures for distributed fp32
/// training: up to ~6e-7 in the losses over 10 steps on any CPU kernels). Our CPU run matches
/// PyTorch's fp32 run within 1e-6, so 1e-4 still catches a real error (a wrong rounding,
/// a dropped term of the loss or of a gradient moves the loss by far more).
constexpr double kGpuFp32Tol = 1e-4;

struct TrainRun {
  std::vector<StepRecord> steps;
  std::map<std::string, std::vector<float>> weights;  ///< f32 master weights after the last step
};

/// The parameters' values on the host (each copied through ops::copy, whatever the device).
std::map<std::string, std::vector<float>> host_weights(const Trainer& t) {
  std::map<std::string, std::vector<float>> out;
  for (const Parameter& p : t.parameters()) {
    EXPECT_EQ(p.value->dtype(), DType::F32) << p.name << ": master weights are f32";
    Tensor host = Tensor::zeros(p.value->shape());
    ops::copy(p.value->view(), host.view());
    out[p.name].assign(host.f32(), host.f32() + p.numel());
  }
  return out;
}

TrainRun train(const Bf16TrainReference& ref, const std::string& precision, Device device, int steps = -1) {
  test::TempDir dir;
  ref.write_tokens(dir.file("tokens.npy"));
  TrainOptions o = ref.options(dir.file("tokens.npy"), precision);
  o.device = device;
  Trainer t(o);
  for (const Parameter& p : t.parameters()) {
    EXPECT_EQ(p.value->device(), device) << p.name;
    EXPECT_EQ(p.grad->device(), device) << p.name;
  }
  TrainRun out;
  for (int k = 0; k < (steps < 0 ? ref.steps() : steps); ++k) out.steps.push_back(t.step());
  out.weights = host_weights(t);
  return out;
}

/// Every step's loss, Z-loss and grad norm of `got` within `tol` (relative) of `want`.
void expect_same_run(const std::vector<StepRecord>& got, const std::vector<StepRecord>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    const std::string at = what + " step " + std::to_string(k + 1);
    EXPECT_FALSE(got[k].skipped) << at;
    EXPECT_EQ(got[k].lr, want[k].lr) << at;
    EXPECT_EQ(got[k].target_tokens, want[k].target_tokens) << at;
    EXPECT_NEAR(got[k].loss, want[k].loss, tol * want[k].loss) << at << ": loss";
    EXPECT_NEAR(got[k].z_loss, want[k].z_loss, tol * want[k].z_loss) << at << ": Z-loss";
    EXPECT_NEAR(got[k].grad_norm, want[k].grad_norm, tol * want[k].grad_norm) << at << ": grad norm";
  }
}

class GpuTrainTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuTrainTest, Fp32FollowsTheCpuRun) {
  OLMO2_REQUIRE_DEVICE();
  const Bf16TrainReference ref(GetParam());
  const TrainRun cpu = train(ref, "fp32", Device::CPU), gpu = train(ref, "fp32", Device::CUDA);
  expect_same_run(gpu.steps, cpu.steps, kGpuFp32Tol, GetParam() + " fp32 on cuda");
  double worst = 0;
  for (size_t k = 0; k < gpu.steps.size(); ++k) {
    worst = std::max(worst, ::olmo2::test::abs_diff(gpu.steps[k].loss, cpu.steps[k].loss) / cpu.steps[k].loss);
  }
  // Both runs are held to the PyTorch fp32 run's final weights as a fraction of its update.
  const double u = ref.update_difference(gpu.weights, "fp32");
  EXPECT_LE(u, test::kBf16UpdateTol) << "final weights, relative to the reference's update";
  std::printf("[ cuda fp32 ] %s: losses within %.2e of the CPU run; weights %.2e of the reference's update\n",
              GetParam().c_str(), worst, u);
}

TEST_P(GpuTrainTest, Bf16FollowsTheReferenceAsTheCpuRunDoes) {
  OLMO2_REQUIRE_DEVICE();
  const Bf16TrainReference ref(GetParam());
  const TrainRun gpu = train(ref, "bf16", Device::CUDA);
  const test::StepDifferences d = test::expect_steps_near(gpu.steps, ref.run("bf16"), test::kBf16FirstLossTol,
                                                          test::kBf16LossTol, test::kBf16GradNormTol, "cuda bf16");
  const double u = ref.update_difference(gpu.weights, "bf16");
  EXPECT_LE(u, test::kBf16UpdateTol) << "final master weights, relative to the reference's update";
  std::printf("[ cuda bf16 ] %s: step 1 loss %.2e, later losses %.2e, grad norms %.2e, weights %.2e of the update\n",
              GetParam().c_str(), d.first_loss, d.loss, d.grad_norm, u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuTrainTest, ::testing::Values("mha-f32", "gqa-f32", "deep-gqa-f32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

/// 3 steps on `first`, a checkpoint, then 3 more resumed on `second`: the losses of
/// steps 4–6 equal an uninterrupted CPU run's within kGpuFp32Tol (the same files are
/// read and written on either device).
void expect_resume_across_devices(Device first, Device second) {
  const Bf16TrainReference ref("gqa-f32");
  test::TempDir dir;
  ref.write_tokens(dir.file("tokens.npy"));
  TrainOptions o = ref.options(dir.file("tokens.npy"), "fp32");
  o.steps = 6;
  std::vector<StepRecord> straight;
  {
    Trainer t(o);
    for (int k = 0; k < 6; ++k) straight.push_back(t.step());
  }
  o.save_dir = dir.file("run");
  std::string path;
  {
    TrainOptions a = o;
    a.device = first;
    Trainer t(a);
    for (int k = 0; k < 3; ++k) t.step();
    path = t.save();
  }
  TrainOptions b = o;
  b.device = second, b.resume = path;
  Trainer t(b);
  ASSERT_EQ(t.steps_done(), 3);
  std::vector<StepRecord> resumed;
  for (int k = 0; k < 3; ++k) resumed.push_back(t.step());
  expect_same_run(resumed, std::vector<StepRecord>(straight.begin() + 3, straight.end()), kGpuFp32Tol,
                  std::string("resumed ") + device_name(first) + " -> " + device_name(second));
}

TEST(GpuTrainCheckpoint, ACpuCheckpointResumesOnTheGpu) {
  OLMO2_REQUIRE_DEVICE();
  expect_resume_across_devices(Device::CPU, Device::CUDA);
}

TEST(GpuTrainCheckpoint, AGpuCheckpointResumesOnTheCpu) {
  OLMO2_REQUIRE_DEVICE();
  expect_resume_across_devices(Device::CUDA, Device::CPU);
}

}  // namespace
}  // namespace olmo2
