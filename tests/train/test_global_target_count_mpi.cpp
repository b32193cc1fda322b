// global_target_count over a real DP group under mpirun: the 2^24 case, 9,000,001 +
// 9,000,000 targets, reduces to exactly 18,000,001, and the loss-gradient scale divides
// by it (docs/architecture.md §7 (training semantics), §11.4).
#include <gtest/gtest.h>

#include <cstdint>

#include "parallel/process_groups.h"
#include "runtime/train/global_batch.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2 {
namespace {

using parallel::test::world_rank;
using parallel::test::world_size;

TEST(GlobalTargetCountMpi, TwoToThe24CaseIsExact) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  const int n = world_size();
  // Pure data parallelism: the dp group is the world.
  parallel::ProcessGroups g = parallel::make_process_groups(parallel::Topology::make(n, 1, 1, n), 60.0);
  const int me = world_rank();
  const int64_t local = me == 0 ? 9'000'001 : me == 1 ? 9'000'000 : 0;
  const int64_t count = global_target_count(local, g.dp.get());
  EXPECT_EQ(count, 18'000'001);
  EXPECT_NE(count, static_cast<int64_t>(9'000'001.0f + 9'000'000.0f))
      << "not what an fp32 sum gives (18,000,000)";
  EXPECT_EQ(loss_gradient_scale(1.0, count), static_cast<float>(1.0 / 18'000'001.0));
  EXPECT_NE(loss_gradient_scale(1.0, count), static_cast<float>(1.0 / 18'000'000.0));
}

TEST(GlobalTargetCountMpi, CountsPastTwoToThe31AndANegativeCountOnOneRank) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  const int n = world_size();
  parallel::ProcessGroups g = parallel::make_process_groups(parallel::Topology::make(n, 1, 1, n), 60.0);
  const int64_t big = int64_t{3'000'000'000} + world_rank();
  EXPECT_EQ(global_target_count(big, g.dp.get()), int64_t{3'000'000'000} * n + n * (n - 1) / 2);
  // A negative count on the last rank: every rank throws, none waits.
  const int64_t local = world_rank() == n - 1 ? -4 : 7;
  EXPECT_THROW(global_target_count(local, g.dp.get()), InputError);
  EXPECT_EQ(global_target_count(1, g.dp.get()), n) << "the group is still in step";
}

}  // namespace
}  // namespace olmo2
