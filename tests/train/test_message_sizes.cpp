// No received message overruns a buffer (docs/architecture.md §6): a message of another
// size than the receive expects is refused naming both sizes before a byte reaches the
// receive buffer — for recv and send_recv, in both directions (more and fewer elements
// than expected) — and a pipeline whose stages disagree on the micro-batch (4 on stage 0,
// 1 on the last, and the reverse: what one rank's --micro-batch used to do, aborting with
// "double free or corruption") ends in that error, not in a crash. Built with
// AddressSanitizer (tests/train/CMakeLists.txt), so an overrun anywhere in the process is
// a failure too. Run under mpirun at 2 ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "parallel/partition.h"
#include "parallel/process_groups.h"
#include "runtime/model/model.h"
#include "runtime/model/parameters.h"
#include "runtime/model/init.h"
#include "runtime/train/pipeline_schedule.h"
#include "runtime/train/train_step.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2 {
namespace {

using parallel::Topology;
using parallel::test::world_rank;
using parallel::test::world_size;
using ::testing::HasSubstr;

constexpr float kSentinel = -12345.0f;

/// A receive buffer of `n` floats inside a larger allocation whose every float is the
/// sentinel: after a refused receive, nothing of it may have changed.
struct GuardedBuffer {
  std::vector<float> all;
  int64_t n;
  explicit GuardedBuffer(int64_t n) : all(static_cast<size_t>(n + 4096), kSentinel), n(n) {}
  std::span<float> span() { return std::span<float>(all.data(), static_cast<size_t>(n)); }
  bool untouched() const {
    for (float v : all) {
      if (v != kSentinel) return false;
    }
    return true;
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(MessageSizes, AReceiveOfAnotherSizeIsRefusedBeforeAnyCopy) {
  if (world_size() != 2) GTEST_SKIP() << "written for 2 ranks, this world has " << world_size();
  auto g = parallel::make_process_groups(Topology::make(2, 1, 2, 1), 30.0);
  parallel::Communicator& pp = *g.pp;
  for (const auto& [sent, expected] : {std::pair<int64_t, int64_t>{4096, 1024}, {1024, 4096}}) {
    std::vector<float> out(static_cast<size_t>(sent), 1.5f);
    if (pp.rank() == 0) {
      pp.send(std::span<const float>(out), 1, 7);
    } else {
      GuardedBuffer in(expected);
      const std::string m = error_of([&] { pp.recv(in.span(), 0, 7); });
      EXPECT_THAT(m, HasSubstr("brought " + std::to_string(sent * 4) + " bytes (" + std::to_string(sent) +
                               " f32), expected " + std::to_string(expected) + " f32"))
          << sent << " sent";
      EXPECT_TRUE(in.untouched()) << "a refused receive wrote into the buffer";
    }
    pp.barrier();
  }
  // send_recv: each side's receive checked on its own.
  const int64_t mine = pp.rank() == 0 ? 4096 : 1024, theirs = 1024;
  std::vector<float> out(static_cast<size_t>(mine), 2.5f);
  GuardedBuffer in(theirs);
  const std::string m = error_of([&] { pp.send_recv(std::span<const float>(out), in.span(), 1 - pp.rank(), 8, 8); });
  if (pp.rank() == 1) {
    EXPECT_THAT(m, HasSubstr("brought 16384 bytes (4096 f32), expected 1024 f32"));
    EXPECT_TRUE(in.untouched());
  } else {
    EXPECT_EQ(m, "") << "rank 0 got what it expected";
  }
  pp.barrier();
}

/// The 1F1B pipeline over 2 stages with `micro` sequences a micro-batch on this stage:
/// the error each stage ends with ("" when none).
std::string pipeline_with_micro_batch(int64_t micro, parallel::ProcessGroups& g) {
  ModelConfig c;
  c.vocab_size = 64, c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8, c.max_position_embeddings = 32;
  c.rms_norm_eps = 1e-6, c.rope_theta = 10000;
  const parallel::PartitionPlan plan = parallel::make_partition_plan(model_shape(c), 1, 2, 1);
  const ShardSpec sh = ShardSpec::from_plan(plan, g.world->rank());
  Olmo2Model m = Olmo2Model::from_weights(c, sh, zero_weights(c, sh));
  ModelWeights grads = zeros_like_weights(m.weights());
  std::vector<Parameter> ps = list_parameters(m.mutable_weights(), grads, c, sh);
  init_parameters(ps, 1, 0.02);
  std::vector<std::vector<Sample>> mbs;
  for (int64_t b = 0; b < 4 / micro; ++b) {
    std::vector<Sample> mb;
    for (int64_t s = 0; s < micro; ++s) mb.push_back(Sample{std::vector<int32_t>(16, 3), std::vector<int32_t>(16, 4), 0});
    mbs.push_back(mb);
  }
  return error_of([&] { pipeline_forward_backward(m, grads, mbs, 1e-4f, 0.25f, 512, ParallelContext{nullptr, g.pp.get()}); });
}

TEST(MessageSizes, StagesThatDisagreeOnTheMicroBatchEndInAnErrorNotACrash) {
  if (world_size() != 2) GTEST_SKIP() << "written for 2 ranks, this world has " << world_size();
  for (const auto& [first, last] : {std::pair<int64_t, int64_t>{4, 1}, {1, 4}}) {
    auto g = parallel::make_process_groups(Topology::make(2, 1, 2, 1), 5.0);  // a stage left waiting times out
    const std::string m = pipeline_with_micro_batch(g.pp->rank() == 0 ? first : last, g);
    // The last stage receives the activations: it refuses them, naming both sizes. Stage 0
    // then waits for gradients that never come, and times out.
    if (g.pp->rank() == 1) {
      EXPECT_THAT(m, HasSubstr("expected " + std::to_string(last * 16 * 32) + " f32")) << first << " / " << last;
      EXPECT_THAT(m, HasSubstr("brought " + std::to_string(first * 16 * 32 * 4) + " bytes")) << first << " / " << last;
    } else {
      EXPECT_NE(m, "") << first << " / " << last << ": stage 0 cannot finish";
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

}  // namespace
}  // namespace olmo2
