// parallel/agreement: a failure on some ranks becomes the same error on every rank,
// naming the lowest failing rank unless every rank failed; any_rank is a vote.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "parallel/agreement.h"
#include "parallel/process_groups.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2::parallel {
namespace {

using test::message_of;
using test::world_rank;
using test::world_size;
using ::testing::HasSubstr;

TEST(Agreement, EveryRankThrowsTheLowestFailingRanksMessage) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 30.0);
  agree(g.world.get(), [] {});  // nobody fails: no throw
  const std::string some = message_of<AgreedError>([&] {
    agree(g.world.get(), [&] {
      if (world_rank() >= std::max(1, n - 2)) OLMO2_THROW(InputError, "bad file on rank ", world_rank());
    });
  });
  const int first = std::max(1, n - 2);
  EXPECT_EQ(some, "rank " + std::to_string(first) + (n > 2 ? " (and 1 other ranks)" : "") + ": bad file on rank " +
                      std::to_string(first));
  const std::string all = message_of<AgreedError>([&] {
    agree(g.world.get(), [&] { OLMO2_THROW(InputError, "seq-len too long"); });
  });
  EXPECT_EQ(all, "seq-len too long") << "an error every rank saw names no rank";
  EXPECT_TRUE(any_rank(g.world.get(), world_rank() == n - 1));
  EXPECT_FALSE(any_rank(g.world.get(), false));
  std::string text = world_rank() == 0 ? "from rank 0" : "";
  broadcast_string(*g.world, text, 0);
  EXPECT_EQ(text, "from rank 0");
}

}  // namespace
}  // namespace olmo2::parallel
