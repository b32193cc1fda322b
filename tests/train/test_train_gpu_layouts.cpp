// Multi-rank training on one GPU (docs/architecture.md §6, §7): the 2-rank layouts — tp 2,
// dp 2 and pp 2 — with every rank's tensors on the device and the collectives carried by
// HostStagedCommunicator (device views staged through the host over MPI; NCCL refuses
// two ranks on one GPU), train the golden fixture's run (tests/golden/bf16_train_fixture.h)
// as one process does on the CPU: fp32 losses and grad norms within 1e-4 relative, bf16
// within the bounds the CPU run is held to against the PyTorch reference. Run under
// mpirun -np 2; label gpu: skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "parallel/device_communicator.h"
#include "parallel/process_groups.h"
#include "runtime/train/trainer.h"
#include "tests/golden/bf16_train_fixture.h"
#include "tests/ops/cuda/cuda_test_util.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using parallel::Topology;
using parallel::test::world_rank;
using parallel::test::world_size;

/// As tests/train/test_train_gpu.cpp: another summation order than the CPU's, held to the
/// bound distributed fp32 training is held to against one process.
constexpr double kGpuFp32Tol = 1e-4;

struct Layout {
  int tp, pp, dp;
  std::string name() const {
    return "tp" + std::to_string(tp) + "-pp" + std::to_string(pp) + "-dp" + std::to_string(dp);
  }
};

/// `steps` steps of `o` on one process on the CPU.
std::vector<StepRecord> on_one_cpu(TrainOptions o) {
  o.device = Device::CPU;
  Trainer t(o);
  std::vector<StepRecord> out;
  for (int k = 0; k < o.steps; ++k) out.push_back(t.step());
  return out;
}

/// The same run in layout `l` on the GPU, every communicator staging device views
/// through the host.
std::vector<StepRecord> on_the_gpu(TrainOptions o, const Layout& l) {
  auto groups = parallel::make_process_groups(Topology::make(world_size(), l.tp, l.pp, l.dp), 120.0);
  parallel::wrap_communicators(groups, [](std::unique_ptr<parallel::Communicator> c) {
    return parallel::make_device_communicator(std::move(c), /*distinct_gpus=*/false);  // host-staged
  });
  o.device = Device::CUDA;
  Trainer t(o, &groups);
  for (const Parameter& p : t.parameters()) EXPECT_EQ(p.value->device(), Device::CUDA) << p.name;
  std::vector<StepRecord> out;
  for (int k = 0; k < o.steps; ++k) out.push_back(t.step());
  return out;
}

const Layout kLayouts[] = {{2, 1, 1}, {1, 1, 2}, {1, 2, 1}};

void expect_layouts_follow_the_cpu(const std::string& model) {
  OLMO2_REQUIRE_DEVICE();
  if (world_size() != 2) GTEST_SKIP() << "written for 2 ranks, this world has " << world_size();
  const test::Bf16TrainReference ref(model);
  test::TempDir dir;  // each rank its own copy of the same tokens (ranks compare contents)
  ref.write_tokens(dir.file("tokens.npy"));
  const TrainOptions fp32 = ref.options(dir.file("tokens.npy"), "fp32");
  const TrainOptions bf16 = ref.options(dir.file("tokens.npy"), "bf16");
  const std::vector<StepRecord> cpu = on_one_cpu(fp32);
  for (const Layout& l : kLayouts) {
    const std::string what = model + " cuda " + l.name();
    const std::vector<StepRecord> gpu = on_the_gpu(fp32, l);
    ASSERT_EQ(gpu.size(), cpu.size()) << what;
    double worst = 0;
    for (size_t k = 0; k < gpu.size(); ++k) {
      const std::string at = what + " fp32 step " + std::to_string(k + 1);
      EXPECT_FALSE(gpu[k].skipped) << at;
      EXPECT_NEAR(gpu[k].loss, cpu[k].loss, kGpuFp32Tol * cpu[k].loss) << at << ": loss";
      EXPECT_NEAR(gpu[k].z_loss, cpu[k].z_loss, kGpuFp32Tol * cpu[k].z_loss) << at << ": Z-loss";
      EXPECT_NEAR(gpu[k].grad_norm, cpu[k].grad_norm, kGpuFp32Tol * cpu[k].grad_norm) << at << ": grad norm";
      worst = std::max(worst, ::olmo2::test::abs_diff(gpu[k].loss, cpu[k].loss) / cpu[k].loss);
    }
    const std::vector<StepRecord> half = on_the_gpu(bf16, l);
    const test::StepDifferences d = test::expect_steps_near(half, ref.run("bf16"), test::kBf16FirstLossTol,
                                                            test::kBf16LossTol, test::kBf16GradNormTol, what + " bf16");
    if (world_rank() == 0) {
      std::printf("[ cuda     ] %s: fp32 losses within %.2e of one CPU process; bf16 vs PyTorch step 1 %.2e, later "
                  "%.2e, grad norms %.2e\n",
                  what.c_str(), worst, d.first_loss, d.loss, d.grad_norm);
    }
  }
}

TEST(GpuTrainLayouts, TwoRanksOnOneGpuFollowTheCpuMHA) { expect_layouts_follow_the_cpu("mha-f32"); }

TEST(GpuTrainLayouts, TwoRanksOnOneGpuFollowTheCpuGQA) { expect_layouts_follow_the_cpu("gqa-f32"); }

}  // namespace
}  // namespace olmo2
