// The thread-count rule and the placement map of docs/architecture.md §7 "Placement", as
// pure functions: settings and masks in, counts and printed lines out.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/placement.h"
#include "parallel/thread_count.h"

namespace olmo2::parallel {
namespace {

using ::testing::HasSubstr;

ThreadSettings settings(int flag, const char* slurm, const char* omp) {
  ThreadSettings s;
  s.flag = flag;
  if (slurm) s.slurm_cpus_per_task = slurm;
  if (omp) s.omp_num_threads = omp;
  return s;
}

TEST(ThreadCount, TheFlagWinsThenSlurmThenOpenMpThenTheMask) {
  EXPECT_EQ(choose_threads(settings(3, "5", "7"), 16, 2), (ThreadChoice{3, ThreadSource::flag}));
  EXPECT_EQ(choose_threads(settings(0, "5", "7"), 16, 2), (ThreadChoice{5, ThreadSource::slurm_cpus_per_task}));
  EXPECT_EQ(choose_threads(settings(0, nullptr, "7"), 16, 2), (ThreadChoice{7, ThreadSource::omp_num_threads}));
  EXPECT_EQ(choose_threads(settings(0, nullptr, nullptr), 16, 2), (ThreadChoice{8, ThreadSource::affinity}));
  // An empty variable is an absent one.
  EXPECT_EQ(choose_threads(settings(0, "", " "), 16, 4), (ThreadChoice{4, ThreadSource::affinity}));
  // A setting may ask for more threads than the mask holds (the user's choice).
  EXPECT_EQ(choose_threads(settings(0, "64", nullptr), 2, 1).threads, 64);
}

TEST(ThreadCount, TheMaskIsSplitAmongTheRanksThatShareItAtLeastOneEach) {
  EXPECT_EQ(threads_from_affinity(16, 1), 16);  // bound to its own 16 cores
  EXPECT_EQ(threads_from_affinity(16, 4), 4);   // four unbound ranks on a 16-core node
  EXPECT_EQ(threads_from_affinity(10, 4), 2);   // rounded down
  EXPECT_EQ(threads_from_affinity(2, 4), 1);    // oversubscribed: at least one
  EXPECT_THROW(threads_from_affinity(0, 1), InputError);
  EXPECT_THROW(threads_from_affinity(4, 0), InputError);
}

TEST(ThreadCount, OpenMpListsGiveTheirOuterLevel) {
  EXPECT_EQ(threads_from_settings(settings(0, nullptr, "8,2"))->threads, 8);
  EXPECT_EQ(threads_from_settings(settings(0, nullptr, " 6 "))->threads, 6);
  EXPECT_EQ(threads_from_settings(settings(0, " 12", nullptr))->threads, 12);
}

void expect_refused(const ThreadSettings& s, const std::string& named) {
  try {
    threads_from_settings(s);
    ADD_FAILURE() << "no error for " << named;
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr(named));
  }
}

TEST(ThreadCount, InvalidValuesAreRefusedNamingTheVariableAndValue) {
  for (const char* bad : {"0", "abc", "2(x3)", "-4", "3.5", "99999999999", "65537", "4,"}) {
    expect_refused(settings(0, bad, nullptr), std::string("SLURM_CPUS_PER_TASK=\"") + bad + "\"");
  }
  for (const char* bad : {"0", "abc", "2(x3)", ",4", "x,2", "65537"}) {
    expect_refused(settings(0, nullptr, bad), std::string("OMP_NUM_THREADS=\"") + bad + "\"");
  }
  // A variable after a deciding setting is not read, so not refused.
  EXPECT_EQ(threads_from_settings(settings(2, "abc", "abc"))->threads, 2);
  EXPECT_EQ(threads_from_settings(settings(0, "3", "abc"))->threads, 3);
  EXPECT_EQ(threads_from_settings(settings(0, "65536", nullptr))->threads, 65536);
  expect_refused(settings(-1, nullptr, nullptr), "--threads must be at least 1, got -1");
}

TEST(ThreadCount, ThisProcessHasAnAffinityMask) {
  const AffinityMask a = affinity_mask(), b = affinity_mask();
  EXPECT_GE(a.cpus, 1);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.cpus, b.cpus);
}

TEST(Placement, LocalRanksCountWithinEachHostInRankOrder) {
  EXPECT_EQ(local_ranks({"a", "b", "a", "b"}), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(local_ranks({"a", "a", "b", "b"}), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(local_ranks({"x"}), (std::vector<int>{0}));
}

TEST(Placement, RanksShareAMaskOnlyOnTheSameHost) {
  // Unbound: every rank of a host has the whole-node mask.
  EXPECT_EQ(ranks_sharing_mask({"a", "a", "a", "a"}, {7, 7, 7, 7}), (std::vector<int>{4, 4, 4, 4}));
  // Bound to a core each.
  EXPECT_EQ(ranks_sharing_mask({"a", "a", "a", "a"}, {1, 2, 3, 4}), (std::vector<int>{1, 1, 1, 1}));
  // The same mask bits on two hosts are two different sets of CPUs.
  EXPECT_EQ(ranks_sharing_mask({"a", "b", "a", "b"}, {7, 7, 7, 9}), (std::vector<int>{2, 1, 2, 1}));
  EXPECT_THROW(ranks_sharing_mask({"a"}, {1, 2}), ShapeError);
}

std::vector<RankPlace> on_hosts(const std::vector<std::string>& hosts, int threads, ThreadSource source) {
  const std::vector<int> local = local_ranks(hosts);
  std::vector<RankPlace> places;
  for (size_t r = 0; r < hosts.size(); ++r) places.push_back(RankPlace{hosts[r], local[r], threads, source, 8, 2});
  return places;
}

TEST(Placement, BlockPlacementPrintsOneLinePerNodeAndNoWarning) {
  const Topology t = Topology::make(4, 2, 1, 2);  // TP groups {0,1} and {2,3}
  const auto lines = describe_placement(on_hosts({"a", "a", "b", "b"}, 4, ThreadSource::affinity), t);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "placement: host a: rank 0 (tp 0, pp 0, dp 0) local 0 threads 4, rank 1 (tp 1, pp 0, dp 0) local 1 "
            "threads 4; threads from the affinity mask (8 CPUs ÷ 2 ranks)");
  EXPECT_EQ(lines[1],
            "placement: host b: rank 2 (tp 0, pp 0, dp 1) local 0 threads 4, rank 3 (tp 1, pp 0, dp 1) local 1 "
            "threads 4; threads from the affinity mask (8 CPUs ÷ 2 ranks)");
}

TEST(Placement, CyclicPlacementWarnsForEveryTpGroupThatSpansNodes) {
  const Topology t = Topology::make(4, 2, 2, 1);  // srun -m cyclic over 2 nodes: 0,2 on a; 1,3 on b
  const auto lines = describe_placement(on_hosts({"a", "b", "a", "b"}, 2, ThreadSource::omp_num_threads), t);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "placement: host a: rank 0 (tp 0, pp 0, dp 0) local 0 threads 2, rank 2 (tp 0, pp 1, dp 0) local 1 "
            "threads 2; threads from OMP_NUM_THREADS");
  EXPECT_EQ(lines[1],
            "placement: host b: rank 1 (tp 1, pp 0, dp 0) local 0 threads 2, rank 3 (tp 1, pp 1, dp 0) local 1 "
            "threads 2; threads from OMP_NUM_THREADS");
  EXPECT_EQ(lines[2],
            "olmo2: warning: TP group {0,1} spans nodes a, b: its all-reduces cross the network every layer; "
            "place TP within a node: srun -m block / --ntasks-per-node");
  EXPECT_EQ(lines[3],
            "olmo2: warning: TP group {2,3} spans nodes a, b: its all-reduces cross the network every layer; "
            "place TP within a node: srun -m block / --ntasks-per-node");
}

TEST(Placement, PipelineAcrossNodesIsNotWarnedAbout) {
  const Topology t = Topology::make(4, 2, 2, 1);  // block over 2 nodes: stage 0 on a, stage 1 on b
  EXPECT_EQ(describe_placement(on_hosts({"a", "a", "b", "b"}, 1, ThreadSource::flag), t).size(), 2u);
  const Topology pp = Topology::make(3, 1, 3, 1);  // tp 1: nothing to warn about on 3 hosts
  EXPECT_EQ(describe_placement(on_hosts({"a", "b", "c"}, 1, ThreadSource::flag), pp).size(), 3u);
}

TEST(Placement, MixedSourcesOnAHostAreNamedPerRank) {
  const Topology t = Topology::make(2, 1, 1, 2);
  std::vector<RankPlace> p = {RankPlace{"h", 0, 3, ThreadSource::slurm_cpus_per_task, 4, 1},
                              RankPlace{"h", 1, 1, ThreadSource::affinity, 1, 1}};
  const auto lines = describe_placement(p, t);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "placement: host h: rank 0 (tp 0, pp 0, dp 0) local 0 threads 3, rank 1 (tp 0, pp 0, dp 1) local 1 "
            "threads 1; threads from: rank 0 SLURM_CPUS_PER_TASK, rank 1 the affinity mask (1 CPU ÷ 1 rank)");
  EXPECT_THROW(describe_placement(p, Topology::make(4, 1, 1, 4)), ShapeError);
}

}  // namespace
}  // namespace olmo2::parallel
