// Communicator::send_start / recv_start (docs/architecture.md §6 (communicators)): started
// messages of any size complete when waited for, receives started before the sender
// sends, sizes checked at the wait before a byte is written, TimedCommunicator's accounting, and the defaults'
// order (a blocking send at once, a receive deferred to its wait). Runs at 2 and 4 ranks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/process_groups.h"
#include "parallel/timed_communicator.h"
#include "tests/parallel/fake_communicator.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2::parallel {
namespace {

using test::FakeCommunicator;
using test::message_of;
using test::world_size;

// 4 MiB each way (far above any eager limit), every call made before any wait, the
// receives first: blocking calls in this order would wait on each other for ever.
TEST(P2pStart, LargeMessagesPostedBothWaysComplete) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  ProcessGroups g = make_process_groups(Topology::make(world_size(), 1, 1, 0), 30.0);
  TimedCommunicator c(std::move(g.world));
  const size_t n = size_t{1} << 20;
  if (c.rank() < 2) {
    const int peer = 1 - c.rank();
    std::vector<float> first(n, -1.0f), second(n, -1.0f);
    std::vector<float> out_a(n, float(10 * c.rank() + 1)), out_b(n, float(10 * c.rank() + 2));
    AsyncHandle r1 = c.recv_start(host_view(first), peer, 3);
    AsyncHandle r2 = c.recv_start(host_view(second), peer, 3);  // same tag: matched in the order waited for
    AsyncHandle s1 = c.send_start(host_view(out_a), peer, 3);
    AsyncHandle s2 = c.send_start(host_view(out_b), peer, 3);
    r1.wait(), r2.wait(), s1.wait(), s2.wait();
    EXPECT_EQ(first.front(), float(10 * peer + 1));
    EXPECT_EQ(first.back(), float(10 * peer + 1));
    EXPECT_EQ(second.front(), float(10 * peer + 2));
    EXPECT_EQ(second.back(), float(10 * peer + 2));
    EXPECT_EQ(c.stats(CommOp::send).calls, 2u);
    EXPECT_EQ(c.stats(CommOp::recv).calls, 2u);
    EXPECT_EQ(c.stats(CommOp::recv).bytes, static_cast<uint64_t>(8 * n));
    EXPECT_EQ(c.sequence(), 0u) << "messages are not collectives";
  }
  c.barrier();
}

TEST(P2pStart, AShorterMessageIsAnErrorAtTheWait) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  ProcessGroups g = make_process_groups(Topology::make(world_size(), 1, 1, 0), 30.0);
  Communicator& c = *g.world;
  std::vector<float> four(4, 1.0f), eight(8);
  if (c.rank() == 0) c.send_start(host_view(four), 1, 9).wait();
  if (c.rank() == 1) {
    AsyncHandle h = c.recv_start(host_view(eight), 0, 9);
    const std::string m = message_of<Error>([&] { h.wait(); });
    EXPECT_NE(m.find("brought 16 bytes (4 f32), expected 8 f32"), std::string::npos) << m;
  }
  c.barrier();
}

TEST(P2pStart, ChecksComeBeforeAnythingIsPosted) {
  FakeCommunicator c(0, 2);
  std::vector<float> x(4);
  EXPECT_THROW(c.send_start(host_view(x), 0, 1), ShapeError) << "a peer that is this rank";
  EXPECT_THROW(c.recv_start(host_view(x), 2, 1), ShapeError) << "a peer outside the group";
  EXPECT_THROW(c.recv_start(host_view(x), 1, -1), ShapeError) << "a negative tag";
  EXPECT_TRUE(c.calls().empty());
}

// The defaults: send_start sends at once; recv_start receives only when waited for, so a
// receive posted ahead of the computation its sender waits on cannot block it.
TEST(P2pStart, DefaultsSendAtOnceAndReceiveAtTheWait) {
  FakeCommunicator c(0, 2, [](int, const TensorView& into) {
    for (int64_t i = 0; i < into.numel(); ++i) static_cast<float*>(into.data())[i] = 7.0f;
  });
  std::vector<float> out(3, 1.0f), in(3, 0.0f);
  AsyncHandle s = c.send_start(host_view(out), 1, 1);
  EXPECT_FALSE(s.pending());
  ASSERT_EQ(c.calls().size(), 1u);
  AsyncHandle r = c.recv_start(host_view(in), 1, 2);
  EXPECT_TRUE(r.pending());
  EXPECT_EQ(c.calls().size(), 1u) << "nothing received before the wait";
  r.wait();
  ASSERT_EQ(c.calls().size(), 2u);
  EXPECT_EQ(c.calls()[1].op, "recv");
  EXPECT_EQ(in, std::vector<float>(3, 7.0f));
}

}  // namespace
}  // namespace olmo2::parallel
