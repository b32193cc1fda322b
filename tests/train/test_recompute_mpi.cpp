// Activation recomputation under MPI (docs/architecture.md §7 "Recomputation"): in each
// layout of this world (np 2: tp 2, pp 2, dp 2, dp 2 with ZeRO-1; np 4: tp 2 × pp 2,
// tp 2 × dp 2 with ZeRO-1), --recompute selective and full train exactly as none: the
// same losses and grad norms bit for bit, and every rank's parameters (its TP/PP shard of
// the f32 master weights) bit for bit after the steps, in fp32 and bf16, OLMo 2 and Olmo 3.
#include <gtest/gtest.h>

#include <cstring>

#include "parallel/process_groups.h"
#include "runtime/train/trainer.h"
#include "tests/launcher/tiny_model.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/train/shared_dir.h"

namespace olmo2 {
namespace {

using parallel::test::world_rank;
using parallel::test::world_size;

constexpr int kSteps = 3;

struct Layout {
  int tp, pp, dp, zero;
  std::string name() const {
    return "tp" + std::to_string(tp) + "-pp" + std::to_string(pp) + "-dp" + std::to_string(dp) +
           (zero ? "-zero" + std::to_string(zero) : "");
  }
};

/// What a run leaves: its step records and this rank's parameters.
struct Run {
  std::vector<double> loss, grad_norm;
  std::vector<std::vector<float>> weights;
};

Run train(const test::SharedDir& dir, const Layout& l, const std::string& precision, const std::string& recompute) {
  TrainOptions o;
  o.model_config = dir.file("config.json");
  o.data = {dir.file("tokens.npy")};
  o.seq_len = 16, o.global_batch = 8, o.micro_batch = 2, o.steps = kSteps;
  o.lr = 1e-2, o.warmup_steps = 1, o.seed = 3, o.z_loss = 1e-4;
  o.precision = precision, o.recompute = recompute, o.zero_stage = l.zero;
  auto groups = parallel::make_process_groups(parallel::Topology::make(world_size(), l.tp, l.pp, l.dp), 120.0);
  Trainer t(o, &groups);
  Run r;
  for (int i = 0; i < kSteps; ++i) {
    const StepRecord s = t.step();
    r.loss.push_back(s.loss), r.grad_norm.push_back(s.grad_norm);
  }
  // Every parameter whole (ZeRO-3 keeps only chunks: assembled on DP rank 0, empty elsewhere).
  for (size_t i = 0; i < t.parameters().size(); ++i) {
    Tensor keep;
    const TensorView v = t.optimizer().value(i, keep);
    if (v.empty() || !v.f32()) {
      r.weights.emplace_back();
    } else {
      r.weights.emplace_back(v.f32(), v.f32() + v.numel());
    }
  }
  return r;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

void expect_modes_bit_identical(bool olmo3) {
  const int world = world_size();
  const Layout all[] = {{2, 1, 1, 0}, {1, 2, 1, 0}, {1, 1, 2, 0}, {1, 1, 2, 1}, {1, 1, 2, 2}, {1, 1, 2, 3},
                        {2, 2, 1, 0}, {2, 1, 2, 1}, {1, 2, 2, 3}};
  test::SharedDir dir;  // the tiny model of the CLI tests (4 layers, GQA; Olmo 3: both layer types per stage)
  if (world_rank() == 0) test::write_tiny_model(dir.path(), olmo3);
  MPI_Barrier(MPI_COMM_WORLD);
  int runs = 0;
  for (const Layout& l : all) {
    if (l.tp * l.pp * l.dp != world) continue;
    for (const std::string precision : {"fp32", "bf16"}) {
      const Run none = train(dir, l, precision, "none");
      for (const std::string mode : {"selective", "full"}) {
        const std::string what = (olmo3 ? "olmo3 " : "olmo2 ") + l.name() + " " + precision + " " + mode;
        const Run got = train(dir, l, precision, mode);
        EXPECT_TRUE(same_bits(got.loss, none.loss)) << what << ": losses, step 1 " << got.loss[0] << " vs "
                                                    << none.loss[0];
        EXPECT_TRUE(same_bits(got.grad_norm, none.grad_norm)) << what << ": grad norms";
        ASSERT_EQ(got.weights.size(), none.weights.size()) << what;
        for (size_t i = 0; i < got.weights.size(); ++i) {
          EXPECT_EQ(std::memcmp(got.weights[i].data(), none.weights[i].data(), got.weights[i].size() * sizeof(float)),
                    0)
              << what << ": parameter " << i << " of rank " << world_rank();
        }
        ++runs;
      }
      EXPECT_GT(none.loss.front(), none.loss.back()) << l.name() << " " << precision << ": the run must learn";
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT_GT(runs, 0) << "no layout of world " << world;
}

TEST(RecomputeMpi, EveryModeTrainsBitIdenticallyOlmo2) { expect_modes_bit_identical(false); }

TEST(RecomputeMpi, EveryModeTrainsBitIdenticallyOlmo3) { expect_modes_bit_identical(true); }

}  // namespace
}  // namespace olmo2
