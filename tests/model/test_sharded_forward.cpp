// The sharded forward in every layout against the single-process forward (and so
// against transformers), on every golden fixture; docs/architecture.md §11.1 (whole-projection
// QK-norm split over TP ranks) and §11.3 (layers that do not divide evenly over pipeline
// stages). Run under mpirun.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "parallel/partition.h"
#include "parallel/process_groups.h"
#include "parallel/tp_qk_norm.h"
#include "runtime/model/model.h"
#include "runtime/io/safetensors.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using parallel::Topology;

using parallel::test::world_rank;
using parallel::test::world_size;

std::vector<int32_t> ref_ids(const SafetensorsFile& ref, int b) {
  const TensorInfo& info = ref.tensors().at("ids." + std::to_string(b));
  std::vector<int32_t> ids(static_cast<size_t>(info.shape[0]));
  std::memcpy(ids.data(), ref.data(info), ids.size() * 4);
  return ids;
}

struct Fixture {
  const char* name;
  double tolerance;  ///< vs the single-process forward
  double golden;     ///< vs transformers' logits: the bound of tests/golden/test_golden.cpp
};

// fp32: 1e-5 absolute (the partial sums of row-parallel products and of the QK-norm
// statistics are added in another order than one process adds them). bf16 (weights held
// in bf16, the checkpoint's precision): a last-bit flip of one bf16 activation can move
// a logit by one bf16 ulp (~0.03). Against transformers every layout keeps the golden
// test's bound: 1e-4 in fp32, 5e-2 in bf16 (docs/architecture.md §10).
// The Olmo 3 fixtures (sliding-window and YaRN layers, docs/architecture.md §3) alike.
const Fixture kFixtures[] = {{"mha-f32", 1e-5, 1e-4},       {"gqa-f32", 1e-5, 1e-4},
                             {"sharded-f32", 1e-5, 1e-4},   {"odd-f32", 1e-5, 1e-4},
                             {"gqa-bf16", 0.1, 5e-2},       {"deep-gqa-f32", 1e-5, 1e-4},
                             {"olmo3-mha-f32", 1e-5, 1e-4}, {"olmo3-gqa-f32", 1e-5, 1e-4},
                             {"olmo3-gqa-bf16", 0.1, 5e-2}};

/// Max |got − ref[key]| over f32 logits of the same shape.
double max_diff_to_reference(const Tensor& got, const SafetensorsFile& ref, const std::string& key) {
  const TensorInfo& info = ref.tensors().at(key);
  EXPECT_EQ(info.shape, got.shape()) << key;
  double worst = 0;
  for (int64_t j = 0; j < got.numel(); ++j) {
    float r;
    std::memcpy(&r, ref.data(info) + 4 * j, 4);
    worst = std::max(worst, double(::olmo2::test::abs_diff(got.f32()[j], r)));
  }
  return worst;
}

// Every layout with tp, pp ∈ {1, 2, 4} and dp ∈ {1, 2} that fills the world.
std::vector<parallel::Layout> layouts(int world) {
  std::vector<parallel::Layout> out;
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      for (int dp : {1, 2})
        if (tp * pp * dp == world) out.push_back({tp, pp, dp});
  return out;
}

TEST(ShardedForward, EveryLayoutMatchesOneProcessOnEveryFixture) {
  const int world = world_size();
  int checked = 0;
  for (const Fixture& fx : kFixtures) {
    const std::string dir = test::source_path(std::string("tests/golden/fixtures/") + fx.name);
    const Olmo2Model whole = Olmo2Model::load(dir);
    const SafetensorsFile ref(dir + "/reference.safetensors");
    const std::vector<std::vector<int32_t>> seqs = {ref_ids(ref, 0), ref_ids(ref, 1)};
    const ForwardResult expected = whole.forward(seqs);
    for (const parallel::Layout& lay : layouts(world)) {
      parallel::PartitionPlan plan;
      try {
        plan = parallel::make_partition_plan(model_shape(whole.config()), lay.tp, lay.pp, lay.dp);
      } catch (const InputError&) {
        continue;  // a refused layout for this model (tested in parallel_partition_test)
      }
      auto groups = parallel::make_process_groups(Topology::make(world, lay.tp, lay.pp, lay.dp), 60.0);
      const int rank = groups.world->rank();
      const Olmo2Model model = Olmo2Model::load(dir, ShardSpec::from_plan(plan, rank));
      // The checkpoint's precision: a bf16 checkpoint's weights are held in bf16.
      EXPECT_EQ(model.precision(), whole.precision());
      EXPECT_EQ(model.weights().layers.empty() ? whole.config().dtype : model.weights().layers[0].q_proj.dtype(),
                weight_dtype(whole.precision()));
      const ParallelContext ctx{groups.tp.get(), groups.pp.get()};
      const int replica = groups.coords().dp;
      // Replica d runs sequences d, d + dp, …, each as its own micro-batch.
      for (size_t i = static_cast<size_t>(replica); i < seqs.size(); i += static_cast<size_t>(lay.dp)) {
        const ForwardResult out = model.forward({seqs[i]}, {}, ctx);
        if (!model.shard().final_norm) {
          EXPECT_TRUE(out.logits.empty());
          continue;
        }
        ASSERT_EQ(out.logits.size(), 1u);
        const Tensor& got = out.logits[0];
        const Tensor& want = expected.logits[i];
        ASSERT_EQ(got.shape(), want.shape());
        double worst = 0;
        for (int64_t j = 0; j < got.numel(); ++j) worst = std::max(worst, double(::olmo2::test::abs_diff(got.f32()[j], want.f32()[j])));
        EXPECT_LE(worst, fx.tolerance) << fx.name << " tp " << lay.tp << " pp " << lay.pp << " dp " << lay.dp
                                       << " rank " << rank << " sequence " << i;
        EXPECT_LE(max_diff_to_reference(got, ref, "logits." + std::to_string(i)), fx.golden)
            << fx.name << " against transformers, tp " << lay.tp << " pp " << lay.pp << " dp " << lay.dp;
        ++checked;
      }
      groups.world->barrier();
    }
  }
  if (world_rank() == 0) std::cout << "[sharded] " << checked << " logit comparisons on rank 0 at world " << world << "\n";
}

TEST(ShardedForward, CaseC1WholeProjectionNormSplitOverRanks) {
  const int world = world_size();
  if (world != 2 && world != 4) GTEST_SKIP() << "this case needs 2 or 4 ranks, have " << world;
  auto groups = parallel::make_process_groups(Topology::make(world, world, 1, 1), 60.0);
  const int r = groups.tp->rank();
  // q = [1, 2, 3, 4] over the TP ranks; k = two kv heads of head_dim 2, replicated
  // on pairs of ranks at tp = 4 (only the first rank of each pair counts its sum).
  const int q_per = 4 / world;
  Tensor q = Tensor::zeros({1, q_per}), wq = Tensor::zeros({q_per});
  for (int i = 0; i < q_per; ++i) q.f32()[i] = float(r * q_per + i + 1), wq.f32()[i] = 1.0f;
  const int head = world == 2 ? r : r / 2;
  Tensor k = Tensor::zeros({1, 2}), wk = Tensor::zeros({2});
  k.f32()[0] = float(2 * head + 1), k.f32()[1] = float(2 * head + 2), wk.f32()[0] = wk.f32()[1] = 1.0f;
  const bool counts = world == 2 || r % 2 == 0;
  parallel::tp_qk_norm(q.view(), wq.view(), 4, k.view(), wk.view(), 4, counts, 0.0f, *groups.tp);
  const float right[4] = {0.3651f, 0.7303f, 1.0954f, 1.4606f};
  for (int i = 0; i < q_per; ++i) EXPECT_NEAR(q.f32()[i], right[r * q_per + i], 1e-4);
  EXPECT_NEAR(k.f32()[0], right[2 * head], 1e-4);
  EXPECT_NEAR(k.f32()[1], right[2 * head + 1], 1e-4);
}

}  // namespace
}  // namespace olmo2
