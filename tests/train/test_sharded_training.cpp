// The tensor-parallel training step (runtime/train/train_step.h with ctx.tp) against the
// single-process one: loss sums and every parameter's gradient slice, at tp = world
// (2 and 4), on golden fixtures (at tp 4 the GQA model's 2 kv heads are replicated)
// and on a model whose vocabulary tp must pad. Also the
// vocab-parallel cross-entropy of docs/architecture.md §11.2. Run under mpirun.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "parallel/partition.h"
#include "parallel/process_groups.h"
#include "parallel/vocab_parallel_loss.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/grad_norm.h"
#include "runtime/train/grad_sync.h"
#include "runtime/model/init.h"
#include "runtime/model/parameters.h"
#include "runtime/train/train_step.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using parallel::Topology;
using parallel::test::world_size;

const std::vector<Sample> kBatch = {
    Sample{{3, 7, 1, 20, 9, 4, 11}, {7, 1, -100, 9, 4, 23, 2}, 0},
    Sample{{11, 2, 8, 50}, {2, 8, 50, 5}, 0},
};

/// Compares one rank's TP gradients with the whole model's, slice by slice.
void expect_same_gradients(const std::string& dir, const std::string& what) {
  const int world = world_size();
  Olmo2Model whole = Olmo2Model::load(dir);
  const ModelConfig& c = whole.config();
  ModelWeights gw = zeros_like_weights(whole.weights());
  const int64_t count = count_targets(kBatch);
  const LossSums want = forward_backward(whole, gw, kBatch, 0.01f, 1.0f / static_cast<float>(count), 5);

  const parallel::PartitionPlan plan = parallel::make_partition_plan(model_shape(c), world, 1, 1);
  auto groups = parallel::make_process_groups(Topology::make(world, world, 1, 1), 60.0);
  const int rank = groups.world->rank();
  Olmo2Model shard = Olmo2Model::load(dir, ShardSpec::from_plan(plan, rank));
  ModelWeights gs = zeros_like_weights(shard.weights());
  const LossSums got = forward_backward(shard, gs, kBatch, 0.01f, 1.0f / static_cast<float>(count), 5,
                                        ParallelContext{groups.tp.get(), nullptr});
  EXPECT_EQ(got.count, want.count);
  EXPECT_NEAR(got.ce_sum, want.ce_sum, 1e-5 * want.ce_sum) << what;
  EXPECT_NEAR(got.z_sq_sum, want.z_sq_sum, 1e-5 * want.z_sq_sum) << what;

  std::vector<Parameter> pw = list_parameters(whole.mutable_weights(), gw, c, whole.shard());
  std::vector<Parameter> ps = list_parameters(shard.mutable_weights(), gs, c, shard.shard());
  sum_kv_replica_gradients(ps, *groups.tp);  // KV < tp: each replica holds a partial k/v gradient
  ASSERT_EQ(pw.size(), ps.size());
  for (size_t i = 0; i < pw.size(); ++i) {
    ASSERT_EQ(pw[i].name, ps[i].name);
    double scale = 0, diff = 0;
    for (int64_t j = 0; j < pw[i].numel(); ++j) scale = std::max(scale, double(std::fabs(pw[i].grad->f32()[j])));
    for (int64_t j = 0; j < ps[i].numel(); ++j) {
      const int64_t g = ps[i].global_index(j);
      const float want_j = g < 0 ? 0.0f : pw[i].grad->f32()[g];
      diff = std::max(diff, double(::olmo2::test::abs_diff(ps[i].grad->f32()[j], want_j)));
    }
    EXPECT_LE(diff, 1e-5 * scale + 1e-9) << what << " " << ps[i].name << " rank " << rank << " tp " << world;
  }
  // docs/architecture.md §11.5 (gradient norm with sharded and replicated parameters) on real
  // gradients: the grad norm at tp = world equals one process's.
  const double norm_whole = global_grad_norm(pw, nullptr, nullptr);
  const double norm_tp = global_grad_norm(ps, groups.tp.get(), nullptr);
  EXPECT_NEAR(norm_tp, norm_whole, 1e-6 * norm_whole) << what << " rank " << rank;
  groups.world->barrier();
}

TEST(ShardedTraining, TensorParallelGradientsEqualOneProcess) {
  const int world = world_size();
  if (world != 2 && world != 4) GTEST_SKIP() << "tp = world needs 2 or 4 ranks, have " << world;
  expect_same_gradients(test::source_path("tests/golden/fixtures/mha-f32"), "mha-f32");
  // gqa-f32 has 2 kv heads: at tp 4 each is replicated on two ranks.
  expect_same_gradients(test::source_path("tests/golden/fixtures/gqa-f32"), "gqa-f32");
  // Olmo 3 (docs/architecture.md §3): windows of 5 and 6 inside the 7-token sequence, YaRN.
  expect_same_gradients(test::source_path("tests/golden/fixtures/olmo3-mha-f32"), "olmo3-mha-f32");
  expect_same_gradients(test::source_path("tests/golden/fixtures/olmo3-gqa-f32"), "olmo3-gqa-f32");
}

TEST(ShardedTraining, PaddedVocabulary) {
  const int world = world_size();
  if (world != 2 && world != 4) GTEST_SKIP() << "needs 2 or 4 ranks, have " << world;
  // vocab 103: tp pads it to 104; heads 4 = kv heads 4.
  ModelConfig c;
  c.vocab_size = 103, c.hidden_size = 32, c.intermediate_size = 48, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 4, c.head_dim = 8, c.max_position_embeddings = 32;
  c.rms_norm_eps = 1e-6, c.rope_theta = 10000.0, c.eos_token_ids = {102};
  Olmo2Model m = Olmo2Model::from_weights(c, ShardSpec::whole(c), zero_weights(c, ShardSpec::whole(c)));
  ModelWeights g = zeros_like_weights(m.weights());
  std::vector<Parameter> params = list_parameters(m.mutable_weights(), g, c, m.shard());
  init_parameters(params, 3, 0.2);
  test::TempDir dir;
  CheckpointContents contents;
  contents.config = c;
  for (const Parameter& p : params) contents.model_tensors.emplace_back(p.name, p.value->view());
  const std::string saved = save_checkpoint(dir.path(), 1, contents, 0);
  expect_same_gradients(saved, "padded vocab 103");
}

// docs/architecture.md §11.5 (gradient norm with sharded and replicated parameters) with
// the case's numbers.
TEST(ShardedTraining, CaseC5ReplicatedGradientsCountOnce) {
  const int world = world_size();
  if (world != 2) GTEST_SKIP() << "this case is written for 2 ranks, have " << world;
  auto groups = parallel::make_process_groups(Topology::make(2, 2, 1, 1), 60.0);
  const int r = groups.tp->rank();
  Tensor w = Tensor::zeros({2}), g = Tensor::zeros({2}), wr = Tensor::zeros({2}), gr = Tensor::zeros({2});
  g.f32()[0] = r == 0 ? 1.0f : 2.0f, g.f32()[1] = r == 0 ? 2.0f : 0.0f;  // column-parallel shards
  gr.f32()[0] = 3.0f, gr.f32()[1] = 4.0f;                                 // a replicated gain
  Parameter col{"col.weight", {4}, &w, &g, true, 0, 2 * r, 2 * r + 2, false};
  Parameter gain{"post_attention_layernorm.weight", {2}, &wr, &gr, true, -1, 0, 0, true};
  const double norm = global_grad_norm({col, gain}, groups.tp.get(), nullptr);
  EXPECT_NEAR(norm, std::sqrt(34.0), 1e-6);  // 5.8310, not √59 = 7.6811
}

// Data parallel: bucketed all-reduce of the gradients (docs/architecture.md §5).
TEST(ShardedTraining, GradientBucketsSumOverDataParallelRanks) {
  const int world = world_size();
  auto groups = parallel::make_process_groups(Topology::make(world, 1, 1, world), 60.0);
  const int r = groups.dp->rank();
  // Three tensors of 5, 13 and 2 elements: rank r holds g = (r + 1)·(i + 1) + tensor.
  std::vector<Tensor> w, g;
  for (int64_t n : {5, 13, 2}) w.push_back(Tensor::zeros({n})), g.push_back(Tensor::zeros({n}));
  std::vector<Parameter> params;
  for (size_t t = 0; t < g.size(); ++t) {
    for (int64_t i = 0; i < g[t].numel(); ++i) g[t].f32()[i] = float((r + 1) * (i + 1)) + float(t);
    const char* names[] = {"p0", "p1", "p2"};
    params.push_back(Parameter{names[t], g[t].shape(), &w[t], &g[t]});
  }
  const uint64_t before = groups.dp->sequence();
  all_reduce_gradients(params, *groups.dp, 4 * 8);  // 8 floats per bucket: 20 floats → 3 buckets
  EXPECT_EQ(groups.dp->sequence() - before, world > 1 ? 3u : 0u);
  const float ranks_sum = float(world * (world + 1) / 2);
  for (size_t t = 0; t < g.size(); ++t) {
    for (int64_t i = 0; i < g[t].numel(); ++i) {
      EXPECT_EQ(g[t].f32()[i], ranks_sum * float(i + 1) + float(world) * float(t)) << "tensor " << t << " element " << i;
    }
  }
  EXPECT_THROW(all_reduce_gradients(params, *groups.dp, 3), InputError);
}

// docs/architecture.md §11.2 (vocab-parallel cross-entropy): logsumexp over the whole vocabulary,
// not each rank's slice.
TEST(ShardedTraining, CaseC2VocabParallelLossUsesTheWholeVocabulary) {
  const int world = world_size();
  if (world != 2) GTEST_SKIP() << "this case is written for 2 ranks, have " << world;
  auto groups = parallel::make_process_groups(Topology::make(2, 2, 1, 1), 60.0);
  const int r = groups.tp->rank();
  // Full logits [0, 1, 2, 3] split [0, 1] | [2, 3]; target 1 (on rank 0).
  Tensor logits = Tensor::zeros({1, 2});
  logits.f32()[0] = float(2 * r), logits.f32()[1] = float(2 * r + 1);
  int32_t target = 1;
  Tensor d = Tensor::zeros({1, 2});
  const ops::CrossEntropySums s = parallel::vocab_parallel_cross_entropy(
      logits.view(), 2 * r, 2, 4, TensorView(&target, DType::I32, {1}), 0.0f, 1.0f, d.view(), *groups.tp);
  const double lse = std::log(1.0 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(s.ce_sum, lse - 1.0, 1e-6);  // 2.4402, not the slice's log(e^0 + e^1) − 1 = 0.3133
  EXPECT_EQ(s.count, 1);
  for (int i = 0; i < 2; ++i) {
    const int id = 2 * r + i;
    EXPECT_NEAR(d.f32()[i], std::exp(id - lse) - (id == 1 ? 1.0 : 0.0), 1e-6);
  }
  // The case's own numbers (docs/architecture.md §11.2): vocab 8, logits 0, 0.5, …, 3.5,
  // target 2, rank 0 holding ids 0–3 and rank 1 ids 4–7, Z-loss coefficient 1e-4.
  Tensor eight = Tensor::zeros({1, 4});
  for (int i = 0; i < 4; ++i) eight.f32()[i] = 0.5f * float(4 * r + i);
  target = 2;
  const ops::CrossEntropySums c2 = parallel::vocab_parallel_cross_entropy(
      eight.view(), 4 * r, 4, 8, TensorView(&target, DType::I32, {1}), 1e-4f, 1.0f, TensorView{}, *groups.tp);
  const double log_z = std::sqrt(c2.z_sq_sum);
  EXPECT_NEAR(log_z, 4.414267, 1e-5) << "rank " << r;  // the slice alone would give 1.914 or 3.914
  EXPECT_NEAR(c2.ce_sum, 3.414267, 1e-5) << "rank " << r;
  EXPECT_NEAR(1e-4 * c2.z_sq_sum, 0.0019486, 1e-7) << "rank " << r;
}

}  // namespace
}  // namespace olmo2
