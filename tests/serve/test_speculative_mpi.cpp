// Speculative decoding under mpirun -np 2 (docs/architecture.md §8): the draft model or
// prompt lookup runs on rank 0, the plan carries the drafted tokens, and every rank of
// the layout verifies them in the step's one forward. At tp 2 and pp 2, in fp32 and
// bf16, every request of every sampling mode gets the bits plain decoding gives in the
// same layout, with a draft that agrees (the target's checkpoint), one that does not and
// prompt lookup.
#include <gtest/gtest.h>

#include "parallel/partition.h"
#include "parallel/process_groups.h"
#include "tests/parallel/mpi_test_util.h"
#include "tests/serve/speculative_fixture.h"

namespace olmo2 {
namespace {

using test::Answer;

struct Layout {
  int tp, pp;
  Precision precision;
};

/// Serves `batch` over this rank's part of `lay`, with a proposer on rank 0 made by
/// `make` (null: plain decoding); rank 0 returns the answers and the metrics' scrape.
std::vector<Answer> serve(const test::EngineModel& ckpt, const Tokenizer& tok, const Layout& lay,
                          const std::vector<CompletionParams>& batch,
                          const std::function<std::shared_ptr<Proposer>()>& make, std::string* scrape) {
  const int world = parallel::test::world_size(), rank = parallel::test::world_rank();
  const parallel::Topology topology = parallel::Topology::make(world, lay.tp, lay.pp, 1);
  const parallel::PartitionPlan plan = parallel::make_partition_plan(model_shape(ckpt.config), lay.tp, lay.pp, 1, {});
  parallel::ProcessGroups groups = parallel::make_process_groups(topology, 120);
  const Olmo2Model model = Olmo2Model::load(ckpt.path, ShardSpec::from_plan(plan, rank), lay.precision);
  EngineOptions o;
  o.scheduler = {.num_blocks = 200, .block_size = 4, .max_running = 16, .max_batch_tokens = 40,
                 .micro_batches = lay.pp, .num_speculative_tokens = 4};
  if (rank == 0 && make) o.proposer = make();
  EngineRanks ranks;
  ranks.world = groups.world.get();
  ranks.groups = ParallelContext{groups.tp.get(), groups.pp.get()};
  ranks.results_root = topology.rank(parallel::Coords{0, 0, lay.pp - 1});
  monitoring::ServeMetrics metrics;
  ServingEngine engine(model, rank == 0 ? &tok : nullptr, &metrics, o, ranks);
  std::vector<Answer> out;
  if (rank == 0) {
    {
      test::EngineThread running(engine);
      out = test::run_batch(engine, batch);
    }
    if (scrape) *scrape = metrics.scrape();
  } else {
    engine.run();
  }
  groups.world->barrier();
  return out;
}

TEST(SpeculativeDecodingUnderMpirun, ExactAtTensorAndPipelineParallelInFp32AndBf16) {
  OLMO2_REQUIRE_WORLD(2);
  const test::EngineModel ckpt;  // each rank writes the same random checkpoint
  const Tokenizer tok = Tokenizer::from_file(test::source_path("data/dolma2-tokenizer.json"));
  const std::vector<CompletionParams> batch = test::speculative_requests();
  for (const Layout lay : {Layout{2, 1, Precision::FP32}, Layout{1, 2, Precision::FP32}, Layout{2, 1, Precision::BF16}}) {
    const std::string what = "tp " + std::to_string(lay.tp) + " pp " + std::to_string(lay.pp) + " " +
                             precision_name(lay.precision);
    const std::vector<Answer> want = serve(ckpt, tok, lay, batch, nullptr, nullptr);
    const std::vector<test::ProposerCase> cases = {
        {"a draft that agrees (the target's checkpoint)",
         [&] {
           return std::make_shared<DraftModelProposer>(
               std::make_unique<Olmo2Model>(Olmo2Model::load(ckpt.path, ShardSpec::whole(ckpt.config), lay.precision)),
               200, 4);
         },
         1},
        {"a draft that disagrees (other weights)",
         [&] {
           return std::make_shared<DraftModelProposer>(
               std::make_unique<Olmo2Model>(Olmo2Model::random(ckpt.config, 77, 0.2f, lay.precision)), 200, 4);
         },
         -1},
        {"prompt lookup of 2-grams", [] { return std::make_shared<NgramProposer>(2); }, 0}};
    for (const test::ProposerCase& pc : cases) {
      std::string scrape;
      const std::vector<Answer> got = serve(ckpt, tok, lay, batch, pc.make, &scrape);
      if (parallel::test::world_rank() != 0) continue;
      test::expect_same_answers(got, want, what + ", " + pc.name);
      const double proposed = test::scraped(scrape, "olmo2_serve_spec_proposed_tokens_total");
      const double accepted = test::scraped(scrape, "olmo2_serve_spec_accepted_tokens_total");
      EXPECT_GT(proposed, 0) << what << ", " << pc.name;
      // Under TP the target's logits differ from one process's in the last bits, and so
      // from the draft's: the agreeing draft agrees on most greedy tokens, not all.
      if (pc.agreement > 0) EXPECT_GT(accepted, 0) << what;
      std::cout << "[speculative] " << what << ", " << pc.name << ": " << accepted << " of " << proposed
                << " drafted tokens accepted\n";
    }
  }
}

}  // namespace
}  // namespace olmo2
