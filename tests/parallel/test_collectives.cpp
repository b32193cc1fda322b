// Every collective's values on the world, tp, dp and pp groups of each layout, and
// send/recv between pipeline neighbours. Each layout runs when the world has its size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/process_groups.h"
#include "tests/parallel/mpi_test_util.h"

namespace olmo2::parallel {
namespace {

using test::world_rank;

struct Case {
  int world, tp, pp, dp;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::ostringstream name;
  name << "w" << c.world << "_tp" << c.tp << "_pp" << c.pp << "_dp" << c.dp;
  return name.str();
}

// Integer-valued floats, exact under summation: a rank's contribution is recognisable.
float value(int rank, size_t i) {
  return static_cast<float>(1000 * rank + static_cast<int>(i % 997));
}
// Values whose maximum comes from different ranks at different positions.
float spiky(int rank, size_t i) { return static_cast<float>((rank * 7 + i * 3) % 11) - 5.0f; }

// EXPECTs got[i] == want(i) for every i, reporting the count and the first mismatch.
template <typename T, typename F>
void expect_all(const std::vector<T>& got, F want, const std::string& what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == static_cast<T>(want(i))) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " wrong, first at " << first
                     << ": got " << static_cast<double>(got[first]) << ", want "
                     << static_cast<double>(static_cast<T>(want(first)));
}

// Runs every collective on `c`, whose members are the world ranks `members` (sorted:
// group rank r is world rank members[r]), with n elements per rank.
void check_collectives(Communicator& c, const std::vector<int>& members, size_t n) {
  const std::string where = c.name() + ", n = " + std::to_string(n);
  const int k = c.size();
  ASSERT_EQ(k, static_cast<int>(members.size())) << where;
  ASSERT_EQ(members[c.rank()], world_rank()) << where;
  const uint64_t seq0 = c.sequence();
  const int me = world_rank();

  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = value(me, i);
  c.all_reduce_sum(x);
  expect_all(
      x,
      [&](size_t i) {
        float s = 0;
        for (int m : members) s += value(m, i);
        return s;
      },
      "all_reduce_sum on " + where);

  for (size_t i = 0; i < n; ++i) x[i] = spiky(me, i);
  c.all_reduce_max(x);
  expect_all(
      x,
      [&](size_t i) {
        float s = -1e9f;
        for (int m : members) s = std::max(s, spiky(m, i));
        return s;
      },
      "all_reduce_max on " + where);

  std::vector<float> in(n), out(n * k, -1.0f);
  for (size_t i = 0; i < n; ++i) in[i] = value(me, i);
  c.all_gather(in, out);
  expect_all(
      out, [&](size_t j) { return value(members[j / n], j % n); }, "all_gather on " + where);

  std::vector<float> full(n * k), part(n, -1.0f);
  for (size_t j = 0; j < full.size(); ++j) full[j] = value(me, j);
  c.reduce_scatter_sum(full, part);
  expect_all(
      part,
      [&](size_t i) {
        float s = 0;
        for (int m : members) s += value(m, c.rank() * n + i);
        return s;
      },
      "reduce_scatter_sum on " + where);

  for (int root = 0; root < k; ++root) {
    for (size_t i = 0; i < n; ++i) x[i] = c.rank() == root ? value(me, i) : -1.0f;
    c.broadcast(std::span<float>(x), root);
    expect_all(
        x, [&](size_t i) { return value(members[root], i); },
        "broadcast from " + std::to_string(root) + " on " + where);
    std::vector<std::byte> b(n + 3, std::byte{0xff});
    if (c.rank() == root) {
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(me * 31 + i);
    }
    c.broadcast(std::span<std::byte>(b), root);
    expect_all(
        b, [&](size_t i) { return static_cast<std::byte>(members[root] * 31 + i); },
        "byte broadcast from " + std::to_string(root) + " on " + where);
  }
  c.barrier();

  const uint64_t issued = 5 + 2 * static_cast<uint64_t>(k);
  EXPECT_EQ(c.sequence(), seq0 + issued) << where;
  // Every member counted the same collectives.
  const float mine = static_cast<float>(c.sequence());
  std::vector<float> seqs(k);
  c.all_gather(std::span<const float>(&mine, 1), seqs);
  expect_all(
      seqs, [&](size_t) { return mine; }, "sequence numbers on " + where);
  EXPECT_EQ(c.sequence(), seq0 + issued + 1) << where;
}

class Layouts : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& p = GetParam();
    OLMO2_REQUIRE_WORLD(p.world);
    topology_ = Topology::make(p.world, p.tp, p.pp, p.dp);
    groups_ = make_process_groups(topology_, 60.0);  // a bug fails, it does not hang
  }
  Topology topology_;
  ProcessGroups groups_;
};

TEST_P(Layouts, GroupsMatchTheTopology) {
  const Topology& t = topology_;
  ProcessGroups& g = groups_;
  const int me = world_rank();
  const Coords c = t.coords(me);
  EXPECT_EQ(g.coords(), c);
  EXPECT_EQ(g.topology.layout(), t.layout());
  EXPECT_EQ(g.world->name(), "world");
  EXPECT_EQ(g.tp->name(), "tp");
  EXPECT_EQ(g.dp->name(), "dp");
  EXPECT_EQ(g.pp->name(), "pp");
  EXPECT_EQ(g.world->rank(), me);
  EXPECT_EQ(g.world->size(), t.world());
  EXPECT_EQ(g.tp->rank(), c.tp);
  EXPECT_EQ(g.tp->size(), t.layout().tp);
  EXPECT_EQ(g.dp->rank(), c.dp);
  EXPECT_EQ(g.dp->size(), t.layout().dp);
  EXPECT_EQ(g.pp->rank(), c.pp);
  EXPECT_EQ(g.pp->size(), t.layout().pp);
  for (Communicator* comm : {g.world.get(), g.tp.get(), g.dp.get(), g.pp.get()}) {
    EXPECT_EQ(comm->sequence(), 0u) << comm->name();
    EXPECT_EQ(comm->timeout_s(), 60.0) << comm->name();
  }

  // Node-local ranks: 0..local_size-1 on each node, the nodes' sizes adding up to the world.
  ASSERT_GE(g.local_rank, 0);
  ASSERT_LT(g.local_rank, g.local_size);
  std::vector<float> first_sizes(t.world());
  const float mine = g.local_rank == 0 ? static_cast<float>(g.local_size) : 0.0f;
  g.world->all_gather(std::span<const float>(&mine, 1), first_sizes);
  EXPECT_EQ(std::accumulate(first_sizes.begin(), first_sizes.end(), 0.0f),
            static_cast<float>(t.world()));
}

TEST_P(Layouts, CollectivesOnEveryGroup) {
  const Topology& t = topology_;
  ProcessGroups& g = groups_;
  const int me = world_rank();
  std::vector<int> everyone(t.world());
  std::iota(everyone.begin(), everyone.end(), 0);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{70001}}) {
    check_collectives(*g.world, everyone, n);
    check_collectives(*g.tp, t.tp_group(me), n);
    check_collectives(*g.dp, t.dp_group(me), n);
    check_collectives(*g.pp, t.pp_group(me), n);
  }
}

TEST_P(Layouts, SendRecvBetweenPipelineNeighbours) {
  const Topology& t = topology_;
  Communicator& pp = *groups_.pp;
  const std::vector<int> stages = t.pp_group(world_rank());
  const int s = pp.rank(), last = pp.size() - 1, me = world_rank();
  // Forward (small and large, the latter beyond the eager limit) then backward, as
  // activations and gradients travel; and bytes.
  for (size_t n : {size_t{5}, size_t{300000}}) {
    std::vector<float> act(n);
    if (s > 0) {
      pp.recv(act, s - 1, 1);
      expect_all(
          act, [&](size_t i) { return value(stages[s - 1], i); }, "forward recv");
    }
    for (size_t i = 0; i < n; ++i) act[i] = value(me, i);
    if (s < last) pp.send(act, s + 1, 1);

    std::vector<float> grad(n);
    if (s < last) {
      pp.recv(grad, s + 1, 2);
      expect_all(
          grad, [&](size_t i) { return -value(stages[s + 1], i); }, "backward recv");
    }
    for (size_t i = 0; i < n; ++i) grad[i] = -value(me, i);
    if (s > 0) pp.send(grad, s - 1, 2);
  }
  std::vector<std::byte> plan(13);
  if (s > 0) {
    pp.recv(std::span<std::byte>(plan), s - 1, 3);
    expect_all(
        plan, [&](size_t i) { return static_cast<std::byte>(stages[s - 1] + i); }, "bytes");
  }
  for (size_t i = 0; i < plan.size(); ++i) plan[i] = static_cast<std::byte>(me + i);
  if (s < last) pp.send(std::span<const std::byte>(plan), s + 1, 3);
  EXPECT_EQ(pp.sequence(), 0u) << "send/recv are not collectives";
}

INSTANTIATE_TEST_SUITE_P(Parallel, Layouts,
                         ::testing::Values(Case{1, 1, 1, 1}, Case{2, 2, 1, 1}, Case{2, 1, 2, 1},
                                           Case{2, 1, 1, 2}, Case{4, 2, 2, 1}, Case{4, 2, 1, 2},
                                           Case{4, 1, 2, 2}, Case{4, 4, 1, 1}, Case{4, 1, 4, 1},
                                           Case{4, 1, 1, 4}),
                         case_name);

}  // namespace
}  // namespace olmo2::parallel
