// MpiCommunicator's contract checks, timeouts and the MPI runtime. Runs at any world
// size; the timeout tests need two ranks or more.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/process_groups.h"
#include "parallel/timed_communicator.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2::parallel {
namespace {

using test::message_of;
using test::world_rank;
using test::world_size;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(MpiRuntime, ReportsTheWorldAndDoesNotReinitialise) {
  MpiRuntime again;  // main() initialised MPI: this one neither initialises nor finalises
  EXPECT_TRUE(again.was_initialized());
  EXPECT_EQ(again.world_rank(), world_rank());
  EXPECT_EQ(again.world_size(), world_size());
  EXPECT_GE(again.thread_level(), ThreadLevel::funneled);
}

TEST(MpiCommunicator, RefusesHandlesItCannotOwn) {
  EXPECT_TRUE(contains(message_of<Error>([] { MpiCommunicator c(MPI_COMM_WORLD, "world", 1.0); }),
                       "MPI_COMM_WORLD"));
  EXPECT_THROW(MpiCommunicator(MPI_COMM_NULL, "tp", 1.0), Error);
}

TEST(MpiCommunicator, ProcessGroupsRefuseAWrongWorld) {
  const int n = world_size();
  EXPECT_EQ(
      message_of<InputError>([&] { make_process_groups(Topology::make(2 * n, 2, 1, 0), 1.0); }),
      "layout tp 2 × pp 1 × dp " + std::to_string(n) + " = " + std::to_string(2 * n) +
          " ranks, but MPI started " + std::to_string(n));
  EXPECT_TRUE(contains(
      message_of<InputError>([&] { make_process_groups(Topology::make(n, 1, 1, 0), -1.0); }),
      "timeout -1"));
}

TEST(MpiCommunicator, ChecksSizesBeforeCommunicating) {
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 30.0);
  Communicator& c = *g.world;
  std::vector<float> in(3), out(3 * n + 1), big(3 * n);
  EXPECT_EQ(message_of<ShapeError>([&] { c.all_gather(in, out); }),
            "all_gather on group world: out has " + std::to_string(3 * n + 1) +
                " f32, expected " + std::to_string(n) +
                " ranks × in 3 = " + std::to_string(3 * n));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { c.reduce_scatter_sum(out, in); }),
                       "reduce_scatter_sum on group world: in has " + std::to_string(3 * n + 1)));
  EXPECT_TRUE(contains(
      message_of<ShapeError>([&] { c.all_gather(std::span<const float>(big.data(), 3), big); }),
      "overlap"));
  EXPECT_EQ(message_of<ShapeError>([&] { c.broadcast(std::span<float>(in), n); }),
            "broadcast on group world: root " + std::to_string(n) + " out of range [0, " +
                std::to_string(n) + ")");
  EXPECT_THROW(c.broadcast(std::span<float>(in), -1), ShapeError);
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { c.send(in, c.rank(), 0); }),
                       "send on group world: peer " + std::to_string(c.rank())));
  EXPECT_THROW(c.recv(in, n, 0), ShapeError);
  if (n > 1) {
    EXPECT_TRUE(contains(message_of<ShapeError>([&] { c.send(in, (c.rank() + 1) % n, -2); }),
                         "tag -2 out of range"));
  }
  EXPECT_THROW(c.set_timeout(-0.5), InputError);
  EXPECT_EQ(c.sequence(), 0u) << "refused calls are not counted";
  c.barrier();
  EXPECT_EQ(c.sequence(), 1u);
}

// all_gather_start: two gathers outstanding at once with a blocking collective posted
// between them (MPI's rule: the same order on every rank), waited for in reverse order;
// TimedCommunicator forwards it and counts it once, with the gathered whole's bytes.
TEST(MpiCommunicator, StartedAllGathersCompleteBesideOtherCollectives) {
  const int n = world_size(), r = world_rank();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 30.0);
  TimedCommunicator c(std::move(g.world));
  std::vector<float> a_in{float(r), float(10 + r)}, a_out(2 * static_cast<size_t>(n));
  std::vector<int32_t> b_in{100 * r}, b_out(static_cast<size_t>(n));
  AsyncHandle a = c.all_gather_start(host_view(a_in), host_view(a_out));
  AsyncHandle b = c.all_gather_start(host_view(b_in), host_view(b_out));
  std::vector<int64_t> one{1};
  c.all_reduce_sum(one);
  EXPECT_EQ(one[0], n);
  EXPECT_TRUE(a.pending() && b.pending());
  b.wait(), a.wait();
  EXPECT_FALSE(a.pending() || b.pending());
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(a_out[2 * static_cast<size_t>(k)], float(k));
    EXPECT_EQ(a_out[2 * static_cast<size_t>(k) + 1], float(10 + k));
    EXPECT_EQ(b_out[static_cast<size_t>(k)], 100 * k);
  }
  EXPECT_EQ(c.sequence(), 3u);
  EXPECT_EQ(c.stats(CommOp::all_gather).calls, 2u);
  EXPECT_EQ(c.stats(CommOp::all_gather).bytes, static_cast<uint64_t>(12 * n));
}

// all_reduce_start and reduce_scatter_start: outstanding beside a blocking collective,
// progressed by test() until complete, and the same bits as the blocking calls (f32 sums
// of values whose order matters at 4 ranks, bf16 through its user-defined MPI_Op).
TEST(MpiCommunicator, StartedReductionsEqualTheBlockingOnes) {
  const int n = world_size(), r = world_rank();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 30.0);
  TimedCommunicator c(std::move(g.world));
  std::vector<float> base(static_cast<size_t>(3 * n));
  for (size_t i = 0; i < base.size(); ++i) base[i] = 1.0f / float(3 + r + int(i)) + (r % 2 ? 1e7f : 0.0f);
  std::vector<float> blocking = base, started = base, rs_blocking(3), rs_started(3);
  std::vector<uint16_t> bf(5, uint16_t(0x3f80 + 3 * r)), bf_blocking = bf;
  c.all_reduce(host_view(blocking), ReduceOp::Sum);
  c.reduce_scatter(host_view(base), host_view(rs_blocking), ReduceOp::Sum);
  c.all_reduce(TensorView(bf_blocking.data(), DType::BF16, {5}), ReduceOp::Sum);
  AsyncHandle a = c.all_reduce_start(host_view(started), ReduceOp::Sum);
  AsyncHandle s = c.reduce_scatter_start(host_view(base), host_view(rs_started), ReduceOp::Sum);
  AsyncHandle b = c.all_reduce_start(TensorView(bf.data(), DType::BF16, {5}), ReduceOp::Sum);
  std::vector<int64_t> one{1};
  c.all_reduce_sum(one);
  EXPECT_EQ(one[0], n);
  while (!a.test()) {
  }
  EXPECT_TRUE(a.pending()) << "test() does not finish the handle";
  a.wait(), b.wait(), s.wait();
  EXPECT_TRUE(a.test() && b.test() && s.test());
  for (size_t i = 0; i < blocking.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(started[i]), std::bit_cast<uint32_t>(blocking[i]));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(rs_started[i]), std::bit_cast<uint32_t>(rs_blocking[i]));
  EXPECT_EQ(bf, bf_blocking);
  if (n == 2) EXPECT_EQ(started[0], (1.0f / 3.0f) + (1.0f / 4.0f + 1e7f));
  EXPECT_EQ(c.sequence(), 7u);
  EXPECT_EQ(c.stats(CommOp::all_reduce_sum).calls, 5u);
  EXPECT_EQ(c.stats(CommOp::reduce_scatter_sum).calls, 2u);
  EXPECT_EQ(c.stats(CommOp::reduce_scatter_sum).bytes, static_cast<uint64_t>(2 * 12 * n));
  // Refused like the blocking calls, before anything is posted.
  std::vector<float> odd(3 * n + 1);
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { c.reduce_scatter_start(host_view(odd), host_view(rs_started), ReduceOp::Sum); }),
                       "reduce_scatter_sum on group world: in has"));
  EXPECT_EQ(c.sequence(), 7u);
}

TEST(MpiCommunicator, RecvOfAShorterMessageThrows) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  ProcessGroups g = make_process_groups(Topology::make(world_size(), 1, 1, 0), 30.0);
  Communicator& c = *g.world;
  std::vector<float> four(4, 1.0f), eight(8);
  if (c.rank() == 0) c.send(four, 1, 9);
  if (c.rank() == 1) {
    EXPECT_TRUE(contains(message_of<Error>([&] { c.recv(eight, 0, 9); }),
                         "recv from world rank 0 (tag 9) on group world brought 16 bytes (4 f32), "
                         "expected 8 f32"));
  }
  c.barrier();
}

TEST(MpiCommunicator, SendRecvExchangesLargeMessagesWithoutDeadlock) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  ProcessGroups g = make_process_groups(Topology::make(world_size(), 1, 1, 0), 30.0);
  Communicator& c = *g.world;
  // 4 MiB each way, far above any eager limit: two blocking sends would wait on each
  // other forever (rendezvous); both posted at once they complete.
  const size_t n = size_t{1} << 20;
  if (c.rank() < 2) {
    const int peer = 1 - c.rank();
    std::vector<float> out(n, static_cast<float>(c.rank() + 1)), in(n, -1.0f);
    c.send_recv(out, in, peer, 10 + c.rank(), 10 + peer);
    EXPECT_EQ(in.front(), static_cast<float>(peer + 1));
    EXPECT_EQ(in.back(), static_cast<float>(peer + 1));
    EXPECT_THROW(c.send_recv(out, std::span<float>(out.data() + 1, 4), peer, 1, 1), ShapeError)
        << "overlapping buffers are refused before anything is posted";
  }
  c.barrier();
}

// Every rank but the last enters `late_op` on `c` (timeout `seconds`) and times out; the
// last rank waits on `sync` until they all have, then joins late, so the pending
// operation completes and each timed-out rank finishes it with wait_pending(). The
// message must end with " (" + details + ")" when details is given.
template <typename Op>
void skip_then_join_late(Communicator& c, Communicator& sync, double seconds, Op late_op,
                         const std::string& what, const std::string& details = "") {
  const bool skipper = c.rank() == c.size() - 1;
  c.set_timeout(seconds);
  if (!skipper) {
    try {
      late_op();
      ADD_FAILURE() << "expected a CollectiveTimeout";
    } catch (const CollectiveTimeout& e) {
      const std::string m = e.what();
      const std::string who = "rank " + std::to_string(world_rank()) + " (" + c.name() + " rank " +
                              std::to_string(c.rank()) + " of " + std::to_string(c.size()) + "): ";
      EXPECT_EQ(m.rfind(who + what + " timed out after ", 0), 0u) << m;
      if (!details.empty()) {
        const std::string tail = " s (" + details + ")";
        EXPECT_EQ(m.substr(m.size() - std::min(m.size(), tail.size())), tail) << m;
      }
      EXPECT_GE(e.waited_s(), seconds);
      EXPECT_LT(e.waited_s(), seconds + 5.0);
      EXPECT_EQ(e.group(), c.name());
      EXPECT_EQ(c.pending(), what);
      EXPECT_TRUE(contains(message_of<Error>([&] { c.barrier(); }), "refused: " + what));
    }
  }
  sync.barrier();  // the skipper passes only once every other rank has timed out
  c.set_timeout(30.0);
  if (skipper) {
    late_op();
  } else {
    c.wait_pending();
  }
  EXPECT_EQ(c.pending(), "");
}

TEST(CollectiveTimeout, AllReduceOnWorldNamesTheCollective) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 30.0);
  Communicator& world = *g.world;
  world.barrier();  // #1
  std::vector<float> x(16, static_cast<float>(world_rank() + 1));
  skip_then_join_late(
      world, *g.dp, 1.0, [&] { world.all_reduce_sum(x); }, "all_reduce_sum #2 on group world",
      "16 f32");
  for (float v : x) ASSERT_EQ(v, n * (n + 1) / 2.0f) << "the late all-reduce completed";
  // Still usable, sequences still agree.
  const float seq = static_cast<float>(world.sequence());
  std::vector<float> all(n);
  world.all_gather(std::span<const float>(&seq, 1), all);
  for (float s : all) EXPECT_EQ(s, 2.0f);
}

TEST(CollectiveTimeout, NamesTheDtypeAndElementCount) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, 1, 1, 0), 30.0);
  Communicator& world = *g.world;
  std::vector<int64_t> x(1024, int64_t{1} << 40);
  skip_then_join_late(
      world, *g.dp, 0.5, [&] { world.all_reduce_max(x); }, "all_reduce_max #1 on group world",
      "1024 i64");
  EXPECT_EQ(x[0], int64_t{1} << 40);
  std::vector<uint16_t> bits(6, f32_to_bf16(1.0f));
  const TensorView view(bits.data(), DType::BF16, {2, 3});
  skip_then_join_late(
      world, *g.dp, 0.5, [&] { world.broadcast(view, n - 1); }, "broadcast #2 on group world",
      "6 bf16");  // from the late rank: the others must wait for it
}

TEST(CollectiveTimeout, BarrierOnTensorParallelGroup) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  const int n = world_size();
  ProcessGroups g = make_process_groups(Topology::make(n, n, 1, 1), 30.0);
  std::vector<float> x(3, 1.0f);
  g.tp->all_reduce_sum(x);  // #1
  g.tp->all_reduce_max(x);  // #2
  skip_then_join_late(
      *g.tp, *g.world, 0.5, [&] { g.tp->barrier(); }, "barrier #3 on group tp");
  g.tp->barrier();  // #4
  EXPECT_EQ(g.tp->sequence(), 4u);
}

TEST(CollectiveTimeout, RecvNamesThePeer) {
  OLMO2_REQUIRE_WORLD_AT_LEAST(2);
  ProcessGroups g = make_process_groups(Topology::make(world_size(), 1, world_size(), 1), 30.0);
  Communicator& pp = *g.pp;
  std::vector<float> x(5, static_cast<float>(pp.rank()));
  if (pp.rank() == 0) {
    pp.set_timeout(0.3);
    const std::string m = message_of<CollectiveTimeout>([&] { pp.recv(x, 1, 4); });
    EXPECT_EQ(m.rfind("rank 0 (pp rank 0 of " + std::to_string(pp.size()) +
                          "): recv from pp rank 1 (tag 4) on group pp timed out after ",
                      0),
              0u)
        << m;
    EXPECT_TRUE(contains(m, "(5 f32, after collective #0)")) << m;
  }
  g.world->barrier();
  if (pp.rank() == 1) pp.send(x, 0, 4);
  if (pp.rank() == 0) {
    pp.wait_pending();
    for (float v : x) EXPECT_EQ(v, 1.0f);
  }
}

}  // namespace
}  // namespace olmo2::parallel
