// Context parallelism (docs/architecture.md §7 "Context parallelism") against cp 1: the
// same samples, each sequence's rows split over the CP ranks in the zigzag order and
// attended by ring attention. The reference is the same world with the CP ranks made DP
// replicas (cp 1, dp × cp), which trains on the same global batch: the losses, grad norms
// and final weights agree within rounding (attention and the gradients are summed in
// another order), in fp32 and bf16, OLMo 2 (MHA, GQA) and Olmo 3 (a sliding window shorter
// than the sequence), with every --recompute mode, composed with tp, pp and dp; a
// checkpoint resumes across cp sizes; the refused options are refused on every rank.
// Run under mpirun at 2 and 4 ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "parallel/agreement.h"
#include "parallel/process_groups.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/trainer.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/train/shared_dir.h"
#include "tests/train/tiny_run.h"

namespace olmo2 {
namespace {

using parallel::test::message_of;
using parallel::test::world_rank;
using parallel::test::world_size;

/// Tiny models (width 64, 2 layers, 4 heads) and 2048 tokens of a learnable pattern, in a
/// directory every rank sees under one name: "mha" (4 kv heads), "gqa" (2 kv heads) and
/// "olmo3" (2 kv heads; layer 0 a sliding window of 6 tokens, layer 1 full attention).
class CpRun {
 public:
  CpRun() {
    if (world_rank() == 0) {
      const nlohmann::json base = test::tiny_olmo2_config(4);
      nlohmann::json gqa = test::tiny_olmo2_config(2), olmo3 = gqa;
      olmo3["architectures"] = {"Olmo3ForCausalLM"}, olmo3["model_type"] = "olmo3";
      olmo3["layer_types"] = {"sliding_attention", "full_attention"}, olmo3["sliding_window"] = 6;
      olmo3["rope_theta"] = 500000.0;  // Olmo 3's, which both kinds of layer use unambiguously
      std::ofstream(file("mha.json")) << base.dump(1);
      std::ofstream(file("gqa.json")) << gqa.dump(1);
      std::ofstream(file("olmo3.json")) << olmo3.dump(1);
      test::write_pattern_tokens(file("tokens.npy"), 5);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  std::string file(const std::string& name) const { return dir_.file(name); }
  /// `model` ("mha", "gqa", "olmo3"): 4 sequences of 16 tokens a step, one per micro-batch.
  /// The OLMo 2 recipe's peak lr (4e-4), as the ZeRO test argues: AdamW turns a last-bit
  /// difference of a near-zero gradient into a step of about lr.
  TrainOptions options(const std::string& model, const std::string& save, int64_t steps = 10) const {
    TrainOptions o;
    o.model_config = file(model + ".json");
    o.data = {file("tokens.npy")};
    o.seq_len = 16, o.global_batch = 4, o.micro_batch = 1, o.steps = steps;
    o.lr = 4e-4, o.warmup_steps = 1, o.seed = 7, o.z_loss = 1e-4, o.clip_grad = 1.0;
    if (!save.empty()) o.save_dir = file(save);
    return o;
  }

 private:
  test::SharedDir dir_;
};

struct Trajectory {
  std::vector<double> loss, grad_norm;
};

/// Trains `o` on tp × pp × (the rest as dp) × cp up to step `until` (0: o.steps), saving there.
Trajectory train(const TrainOptions& o, int tp, int pp, int cp, int64_t until = 0) {
  const int dp = world_size() / (tp * pp * cp);
  auto groups = parallel::make_process_groups(parallel::Topology::make(world_size(), tp, pp, dp, 0, cp), 120.0);
  Trainer t(o, &groups);
  Trajectory r;
  while (t.steps_done() < (until ? until : o.steps)) {
    const StepRecord s = t.step();
    r.loss.push_back(s.loss), r.grad_norm.push_back(s.grad_norm);
  }
  if (!o.save_dir.empty()) t.save();
  return r;
}

/// The largest per-tensor relative L2 difference ‖a − b‖ / ‖b‖ of two checkpoints'
/// weights other than the embedding, and the embedding's apart (rank 0 reads them; the
/// others return zeros).
struct WeightsDifference {
  double worst = 0, embedding = 0;
  std::string worst_tensor;
};
WeightsDifference weights_difference(const std::string& a, const std::string& b) {
  WeightsDifference r;
  if (world_rank() != 0) return r;
  const Checkpoint x = Checkpoint::open(a), y = Checkpoint::open(b);
  for (const std::string& name : y.names()) {
    const double rel = test::tensor_difference(x, y, name);
    if (name == "model.embed_tokens.weight") {
      r.embedding = rel;
    } else if (rel > r.worst) {
      r.worst = rel, r.worst_tensor = name;
    }
  }
  return r;
}

/// Tolerances of one comparison, relative: the loss at every step; the grad norm at step 1
/// (both runs start from the same weights: the gradients differ by the sums' order alone)
/// and at later steps; the final weights (the worst tensor's relative L2 difference).
struct Bounds {
  double loss, first_grad_norm, grad_norm, weights, embedding;
};
/// fp32: attention's sums over keys (the online softmax, block by block) and the gradients'
/// sums over CP ranks run in another order than cp 1's: a few ulps at step 1 (measured on
/// this machine: loss and grad norm below 2e-8). After step 1 AdamW turns last-bit
/// differences of near-zero gradient elements into steps of about lr
/// (tests/train/trajectory_bounds.h): measured up to 2.1e-7 of the losses, 7.9e-6 of the
/// grad norms, 4.6e-5 of a weight tensor (Olmo 3's layer-1 o_proj). The embedding's rows
/// are updated only by the tokens they embed: a row whose summed gradient is near AdamW's
/// eps gets a step that depends on its last bits (as in the ZeRO test; measured up to
/// 1.1e-3 with the Cooperlake kernels), so it is bounded apart. The bounds leave a factor of
/// about 5 for other CPUs' kernels.
constexpr Bounds kFp32{1e-6, 1e-6, 1e-4, 5e-4, 5e-3};

/// `model` trained at tp × pp × cp against tp × pp at cp 1 (the CP ranks as DP replicas):
/// 10 steps, losses and grad norms per step and the final weights within `b`.
void expect_equals_cp1(const CpRun& s, const std::string& model, int tp, int pp, int cp, const Bounds& b,
                       const std::string& precision = "fp32", const std::string& recompute = "none") {
  const std::string tag = model + "-" + precision + "-" + recompute + "-tp" + std::to_string(tp) + "-pp" +
                          std::to_string(pp) + "-cp" + std::to_string(cp);
  TrainOptions o = s.options(model, tag);
  o.precision = precision, o.recompute = recompute;
  const Trajectory got = train(o, tp, pp, cp);
  o.save_dir = s.file(tag + "-ref");
  const Trajectory want = train(o, tp, pp, 1);
  ASSERT_EQ(got.loss.size(), want.loss.size());
  double worst_loss = 0, worst_norm = 0;
  const double first_norm = std::abs(got.grad_norm[0] - want.grad_norm[0]) / want.grad_norm[0];
  for (size_t i = 0; i < want.loss.size(); ++i) {
    EXPECT_NEAR(got.loss[i], want.loss[i], b.loss * std::abs(want.loss[i])) << tag << " step " << i + 1;
    EXPECT_NEAR(got.grad_norm[i], want.grad_norm[i], (i == 0 ? b.first_grad_norm : b.grad_norm) * want.grad_norm[i])
        << tag << " step " << i + 1;
    worst_loss = std::max(worst_loss, std::abs(got.loss[i] - want.loss[i]) / std::abs(want.loss[i]));
    worst_norm = std::max(worst_norm, std::abs(got.grad_norm[i] - want.grad_norm[i]) / want.grad_norm[i]);
  }
  const WeightsDifference w =
      weights_difference(s.file(tag + "/step-00000010"), s.file(tag + "-ref/step-00000010"));
  EXPECT_LE(w.worst, b.weights) << tag << ": " << w.worst_tensor;
  EXPECT_LE(w.embedding, b.embedding) << tag << ": the embedding";
  if (world_rank() == 0) {
    std::printf("[ cp ] %s vs cp 1: step-1 grad norm %.1e; over 10 steps loss %.1e, grad norm %.1e, weights %.1e "
                "(%s), embedding %.1e (relative)\n", tag.c_str(), first_norm, worst_loss, worst_norm, w.worst,
                w.worst_tensor.c_str(), w.embedding);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

bool two_ranks() { return world_size() == 2; }

TEST(ContextParallel, Olmo2MhaAndGqaAtCp2EqualCp1) {
  if (!two_ranks()) GTEST_SKIP() << "the np 2 cases";
  CpRun s;
  expect_equals_cp1(s, "mha", 1, 1, 2, kFp32);
  expect_equals_cp1(s, "gqa", 1, 1, 2, kFp32);
}

TEST(ContextParallel, Olmo3SlidingWindowAtCp2EqualsCp1) {
  if (!two_ranks()) GTEST_SKIP() << "the np 2 cases";
  CpRun s;
  expect_equals_cp1(s, "olmo3", 1, 1, 2, kFp32);
}

// Recomputation runs ring attention again in the backward (every CP rank alike).
TEST(ContextParallel, RecomputationAtCp2EqualsCp1) {
  if (!two_ranks()) GTEST_SKIP() << "the np 2 cases";
  CpRun s;
  expect_equals_cp1(s, "gqa", 1, 1, 2, kFp32, "fp32", "full");
  expect_equals_cp1(s, "olmo3", 1, 1, 2, kFp32, "fp32", "selective");
}

// bf16: ring attention rounds the scores and the normalised probabilities where the
// reference rounds them (runtime/model/ring_attention.h), its outputs equal but for rare
// one-ulp flips of a bf16 rounding (2^-8 relative) that the block order moves, and every
// activation after a flipped one moves by the bf16 roundings it then lands on: the loss
// and the gradients at step 1 by a few bf16 ulps at most of one token's terms, far below
// one ulp of the mean. The bounds: 2^-8 relative of the loss at every step and of the
// step-1 grad norm; 4 × 2^-8 of the later grad norms (AdamW's amplification, as in fp32);
// 2^-8 of the weights (measured over the forced kernel paths of tests/train/CMakeLists.txt
// and Cooperlake's: loss ≤ 6.8e-5, step-1 grad norm ≤ 1.8e-8, grad norms ≤ 1.6e-3, weights
// ≤ 2.5e-4, the embedding ≤ 6.1e-4).
TEST(ContextParallel, Bf16AtCp2EqualsCp1WithinBf16Rounding) {
  if (!two_ranks()) GTEST_SKIP() << "the np 2 cases";
  CpRun s;
  expect_equals_cp1(s, "gqa", 1, 1, 2, Bounds{1.0 / 256, 1.0 / 256, 4.0 / 256, 1.0 / 256, 1.0 / 256}, "bf16");
}

TEST(ContextParallel, ComposesWithTpPpAndDp) {
  if (world_size() != 4) GTEST_SKIP() << "the np 4 cases";
  CpRun s;
  expect_equals_cp1(s, "gqa", 2, 1, 2, kFp32);  // cp 2 × tp 2
  expect_equals_cp1(s, "gqa", 1, 2, 2, kFp32);  // cp 2 × pp 2
  expect_equals_cp1(s, "olmo3", 1, 1, 2, kFp32);  // cp 2 × dp 2
}

TEST(ContextParallel, Cp4EqualsCp1) {
  if (world_size() != 4) GTEST_SKIP() << "the np 4 cases";
  CpRun s;
  expect_equals_cp1(s, "olmo3", 1, 1, 4, kFp32);
}

// The checkpoint is the HF layout with nothing of cp in it: a cp 2 run's step-5 checkpoint
// continues at cp 1 (dp 2), and a cp 1 run's at cp 2, each within rounding of the
// uninterrupted cp 1 run.
TEST(ContextParallel, ACheckpointResumesAcrossCpSizes) {
  if (!two_ranks()) GTEST_SKIP() << "the np 2 cases";
  CpRun s;
  const Trajectory whole = train(s.options("gqa", "whole"), 1, 1, 1);
  for (const auto& [from, to] : {std::pair{2, 1}, std::pair{1, 2}}) {
    const std::string half = "half-cp" + std::to_string(from), name = "resumed-cp" + std::to_string(to);
    train(s.options("gqa", half), 1, 1, from, 5);
    TrainOptions o = s.options("gqa", name);
    o.resume = s.file(half + "/step-00000005");
    const Trajectory rest = train(o, 1, 1, to);
    ASSERT_EQ(rest.loss.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_NEAR(rest.loss[i], whole.loss[5 + i], kFp32.loss * whole.loss[5 + i])
          << "cp " << from << " checkpoint resumed at cp " << to << ", step " << 6 + i;
    }
    const WeightsDifference w = weights_difference(s.file(name + "/step-00000010"), s.file("whole/step-00000010"));
    EXPECT_LE(w.worst, kFp32.weights) << "cp " << from << " checkpoint resumed at cp " << to << ": " << w.worst_tensor;
    EXPECT_LE(w.embedding, kFp32.embedding) << "cp " << from << " checkpoint resumed at cp " << to;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(ContextParallel, ASequenceLengthNotDivisibleByTwiceCpAndZeroTwoAreRefusedOnEveryRank) {
  if (!two_ranks()) GTEST_SKIP() << "the np 2 cases";
  CpRun s;
  auto groups = parallel::make_process_groups(parallel::Topology::make(world_size(), 1, 1, 1, 0, 2), 60.0);
  TrainOptions o = s.options("gqa", "");
  o.seq_len = 18;
  std::string m = message_of<parallel::AgreedError>([&] { Trainer t(o, &groups); });
  EXPECT_NE(m.find("--seq-len 18 is not divisible by 2 × --cp 2 = 4"), std::string::npos) << m;
  o = s.options("gqa", "");
  o.zero_stage = 2, o.global_batch = 4;
  m = message_of<parallel::AgreedError>([&] { Trainer t(o, &groups); });
  EXPECT_NE(m.find("--zero-stage 2 with --cp 2 is not supported"), std::string::npos) << m;
}

}  // namespace
}  // namespace olmo2
