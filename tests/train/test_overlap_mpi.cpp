// Communication overlapped with the backward (docs/architecture.md §7 "Overlap"): the DP
// gradient buckets posted inside the backward give the same bits as the same buckets
// reduced after it, in every layout (dp, several micro-batches, tp × dp, pp × dp, ZeRO 1,
// 2 and 3, fp32 and bf16); and the per-step compute / wait / bubble breakdown
// (docs/architecture.md §9 "Step time breakdown"). Run under mpirun at 2 and 4 ranks.
#include <gtest/gtest.h>

#include <bit>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "parallel/process_groups.h"
#include "runtime/io/npy.h"
#include "runtime/train/overlapped_grad_sync.h"
#include "runtime/train/trainer.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/train/shared_dir.h"

namespace olmo2 {
namespace {

using parallel::Topology;
using parallel::test::world_rank;
using parallel::test::world_size;

/// A 2-layer model of width 64 (4 heads, 4 kv heads) and 2048 tokens of a learnable
/// pattern, in a directory every rank sees under one name.
class OverlapRun {
 public:
  OverlapRun() {
    if (world_rank() == 0) {
      const nlohmann::json c = {{"architectures", {"Olmo2ForCausalLM"}}, {"model_type", "olmo2"}, {"vocab_size", 131},
                                {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
                                {"num_attention_heads", 4}, {"num_key_value_heads", 4},
                                {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                                {"tie_word_embeddings", false}, {"eos_token_id", 130}, {"pad_token_id", 129}};
      std::ofstream(dir_.file("config.json")) << c.dump(1);
      std::mt19937 rng(5);
      std::vector<uint32_t> ids(2048);
      for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = static_cast<uint32_t>(i % 32 == 0 ? 130 : rng() % 4 == 0 ? rng() % 128 : (i * 5) % 29);
      }
      NpyWriter w(dir_.file("tokens.npy"));
      w.append(ids);
      w.close();
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  /// 3 steps, global batch 8 of 16 tokens, buckets of 4 KiB (about a hundred per step).
  TrainOptions options() const {
    TrainOptions o;
    o.model_config = dir_.file("config.json");
    o.data = {dir_.file("tokens.npy")};
    o.seq_len = 16, o.global_batch = 8, o.steps = 3;
    o.lr = 1e-2, o.warmup_steps = 1, o.seed = 11, o.z_loss = 1e-4, o.clip_grad = 1.0;
    o.grad_bucket_bytes = 4096;
    return o;
  }

 private:
  test::SharedDir dir_;
};

struct RunResult {
  std::vector<StepRecord> steps;
  std::vector<std::vector<uint32_t>> weights;  // this rank's parameters (ZeRO: its chunks), as bits
};

RunResult train(TrainOptions o, const parallel::Layout& l, bool overlap) {
  o.overlap = overlap;
  auto groups = parallel::make_process_groups(Topology::make(l), 120.0);
  Trainer t(o, &groups);
  RunResult r;
  while (t.steps_done() < o.steps) r.steps.push_back(t.step());
  for (const Parameter& p : t.parameters()) {
    std::vector<uint32_t> bits;
    if (!p.value->empty()) {
      for (int64_t i = 0; i < p.value->numel(); ++i) bits.push_back(std::bit_cast<uint32_t>(p.value->f32()[i]));
    }
    r.weights.push_back(std::move(bits));
  }
  return r;
}

struct Case {
  const char* name;
  parallel::Layout layout;  // tp, pp, dp
  int64_t micro_batch;
  int zero_stage;
  const char* precision;
};

void expect_overlap_changes_no_bit(const Case& c) {
  OverlapRun s;
  TrainOptions o = s.options();
  o.micro_batch = c.micro_batch, o.zero_stage = c.zero_stage, o.precision = c.precision;
  const RunResult on = train(o, c.layout, true), off = train(o, c.layout, false);
  ASSERT_EQ(on.steps.size(), 3u);
  for (size_t i = 0; i < on.steps.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(on.steps[i].loss), std::bit_cast<uint64_t>(off.steps[i].loss))
        << c.name << ", step " << i + 1 << ": " << on.steps[i].loss << " vs " << off.steps[i].loss;
    EXPECT_EQ(std::bit_cast<uint64_t>(on.steps[i].grad_norm), std::bit_cast<uint64_t>(off.steps[i].grad_norm))
        << c.name << ", step " << i + 1;
  }
  EXPECT_GT(on.steps.back().loss, 0.0);
  EXPECT_LT(on.steps.back().loss, on.steps.front().loss) << c.name << ": training does not learn";
  ASSERT_EQ(on.weights.size(), off.weights.size());
  for (size_t i = 0; i < on.weights.size(); ++i) EXPECT_EQ(on.weights[i], off.weights[i]) << c.name << ", parameter " << i;
}

TEST(Overlap, BitIdenticalAtTwoRanks) {
  if (world_size() != 2) GTEST_SKIP() << "2 ranks";
  const parallel::Layout dp2{1, 1, 2};
  for (const Case& c : {Case{"dp 2", dp2, 4, 0, "fp32"}, Case{"dp 2, 2 micro-batches", dp2, 2, 0, "fp32"},
                        Case{"dp 2 bf16, 2 micro-batches", dp2, 2, 0, "bf16"}, Case{"ZeRO-1", dp2, 2, 1, "fp32"},
                        Case{"ZeRO-2", dp2, 2, 2, "fp32"}, Case{"ZeRO-3 bf16", dp2, 2, 3, "bf16"}}) {
    expect_overlap_changes_no_bit(c);
  }
}

TEST(Overlap, BitIdenticalAtFourRanks) {
  if (world_size() != 4) GTEST_SKIP() << "4 ranks";
  for (const Case& c : {Case{"dp 4 (a sum whose order matters), 2 micro-batches", {1, 1, 4}, 1, 0, "fp32"},
                        Case{"tp 2 x dp 2", {2, 1, 2}, 2, 0, "fp32"},
                        Case{"pp 2 x dp 2, 2 micro-batches", {1, 2, 2}, 2, 0, "fp32"},
                        Case{"pp 2 x dp 2 bf16, ZeRO-1", {1, 2, 2}, 2, 1, "bf16"},
                        Case{"ZeRO-2 at dp 4", {1, 1, 4}, 1, 2, "fp32"}}) {
    expect_overlap_changes_no_bit(c);
  }
}

// Buckets in backward order: after the tail's last backward only buckets of the tail
// alone are posted; finish() posts the rest; the sums are exact (small integers).
TEST(Overlap, BucketsArePostedWhenTheirUnitsAreFinal) {
  const int n = world_size(), r = world_rank();
  auto groups = parallel::make_process_groups(Topology::make(n, 1, 1, n), 60.0);
  const char* names[] = {"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "model.norm.weight",
                         "lm_head.weight"};
  std::vector<Tensor> values, grads;
  std::vector<Parameter> params;
  for (int i = 0; i < 4; ++i) {
    values.push_back(Tensor::zeros({10}, DType::F32, Device::CPU));
    grads.push_back(Tensor::zeros({10}, DType::F32, Device::CPU));
    for (int k = 0; k < 10; ++k) grads.back().f32()[k] = static_cast<float>(100 * i + k + r);
  }
  for (int i = 0; i < 4; ++i) {
    Parameter p;
    p.name = names[i], p.value = &values[static_cast<size_t>(i)], p.grad = &grads[static_cast<size_t>(i)];
    p.full_shape = {10};
    params.push_back(p);
  }
  // Backward order: tail (norm 10 + lm_head 10), layer 0 (10), embedding (10); 20 floats a
  // bucket: bucket 0 the tail, bucket 1 layer 0 and the embedding.
  GradBuckets b(params, *groups.dp, 80, 1, 2, true, Device::CPU);
  EXPECT_EQ(b.buckets(), 2u);
  for (int unit : {2, 1, 0}) b.after_backward(unit);  // micro-batch 1 of 2: nothing is final
  EXPECT_EQ(b.posted_early(), 0);
  b.after_backward(2);  // the tail is final: bucket 0 goes
  EXPECT_EQ(b.posted_early(), 1);
  b.after_backward(1);  // bucket 1 waits for the embedding too
  EXPECT_EQ(b.posted_early(), 1);
  b.after_backward(0);
  EXPECT_EQ(b.posted_early(), 2);
  b.finish();
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 10; ++k) {
      EXPECT_EQ(grads[static_cast<size_t>(i)].f32()[k], static_cast<float>(n * (100 * i + k) + n * (n - 1) / 2))
          << names[i] << "[" << k << "]";
    }
  }
}

// The breakdown of every step: compute + bubble + waits = step time, compute > 0, the
// JSON keys; no bubble without a pipeline, a bubble with one; a DP wait with dp > 1.
TEST(Overlap, StepTimeBreakdown) {
  const int n = world_size();
  OverlapRun s;
  for (const parallel::Layout& l : {parallel::Layout{1, 1, n}, parallel::Layout{1, 2, n / 2}}) {
    TrainOptions o = s.options();
    o.micro_batch = 2;
    const RunResult run = train(o, l, true);
    for (const StepRecord& r : run.steps) {
      const nlohmann::json j = r.to_json();
      const double parts = j["compute_time"].get<double>() + j["bubble_time"].get<double>() +
                           j["comm_wait_time"]["tp"].get<double>() + j["comm_wait_time"]["dp"].get<double>() +
                           j["comm_wait_time"]["cp"].get<double>();
      EXPECT_NEAR(parts, j["step_time"].get<double>(), 0.05 * j["step_time"].get<double>());
      EXPECT_GT(j["compute_time"].get<double>(), 0.0);
      EXPECT_EQ(j["comm_wait_time"]["tp"].get<double>(), 0.0);
      EXPECT_EQ(j["comm_wait_time"]["cp"].get<double>(), 0.0);
      if (l.pp == 1) {
        EXPECT_EQ(j["bubble_time"].get<double>(), 0.0);
      } else {
        EXPECT_GT(j["bubble_time"].get<double>(), 0.0) << "a pipeline stage always waits for a message";
      }
      if (l.dp > 1) {
        EXPECT_GT(j["comm_wait_time"]["dp"].get<double>(), 0.0);
      } else {
        EXPECT_EQ(j["comm_wait_time"]["dp"].get<double>(), 0.0);
      }
    }
  }
}

}  // namespace
}  // namespace olmo2
