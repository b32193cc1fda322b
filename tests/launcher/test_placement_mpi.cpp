// The placement map under mpirun, for real (docs/architecture.md §7 "Placement"): rank 0
// prints one line per host with every rank's (tp, pp, dp), local rank and the thread
// count it set (read back from OpenMP), from OMP_NUM_THREADS, SLURM_CPUS_PER_TASK,
// --threads or the affinity mask; an invalid setting on one rank stops every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;

const std::string kModel = test::source_path("tests/golden/fixtures/deep-gqa-f32");

/// `mpirun -np N [MPIRUN_ARGS] env ENV olmo2 generate …` on tp 2 × pp 2 (or tp N when N ≠ 4),
/// with SLURM_CPUS_PER_TASK and OMP_NUM_THREADS unset unless ENV sets them.
test::RunResult generate(int np, const std::string& mpirun_args, const std::string& env, const std::string& extra = "") {
  return test::run_olmo2_with(
      std::string(OLMO2_MPIEXEC) + " -np " + std::to_string(np) + " --oversubscribe --allow-run-as-root " +
          mpirun_args + " env -u SLURM_CPUS_PER_TASK -u OMP_NUM_THREADS " + env + " " + OLMO2_BINARY,
      "generate --model " + kModel + " --prompt-ids 1,2 --max-tokens 2 " +
          (np == 4 ? "--tp 2 --pp 2" : "--tp " + std::to_string(np)) + " " + extra);
}

std::string host() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  return h;
}

/// The line for 4 ranks on this host, tp 2 × pp 2, each with `threads` from `source`.
std::string four_ranks(int threads, const std::string& source) {
  const std::string t = " threads " + std::to_string(threads);
  return "placement: host " + host() + ": rank 0 (tp 0, pp 0, dp 0) local 0" + t + ", rank 1 (tp 1, pp 0, dp 0) local 1" +
         t + ", rank 2 (tp 0, pp 1, dp 0) local 2" + t + ", rank 3 (tp 1, pp 1, dp 0) local 3" + t +
         "; threads from " + source + "\n";
}

int cpus_of_this_process() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

TEST(PlacementUnderMpirun, OmpNumThreadsSetsEveryRanksCount) {
  const auto r = generate(4, "", "OMP_NUM_THREADS=2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, four_ranks(2, "OMP_NUM_THREADS"));  // once, by rank 0, and no warning on one host
  EXPECT_THAT(r.out, HasSubstr("output_ids: "));
}

TEST(PlacementUnderMpirun, SlurmCpusPerTaskWinsOverOmpNumThreadsAndTheFlagOverBoth) {
  auto r = generate(4, "", "SLURM_CPUS_PER_TASK=3 OMP_NUM_THREADS=2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, four_ranks(3, "SLURM_CPUS_PER_TASK"));
  r = generate(4, "", "SLURM_CPUS_PER_TASK=3 OMP_NUM_THREADS=2", "--threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, four_ranks(1, "--threads"));
}

TEST(PlacementUnderMpirun, UnboundRanksSplitTheirSharedMask) {
  const int cpus = cpus_of_this_process();
  const auto r = generate(4, "--bind-to none", "");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, four_ranks(std::max(1, cpus / 4), "the affinity mask (" + std::to_string(cpus) +
                                                         (cpus == 1 ? " CPU" : " CPUs") + " ÷ 4 ranks)"));
}

TEST(PlacementUnderMpirun, RanksBoundToACoreEachUseTheirOwnCores) {
  if (cpus_of_this_process() < 2) GTEST_SKIP() << "one CPU: two ranks cannot be bound to a core each";
  const auto r = generate(2, "--bind-to core --map-by core", "");
  ASSERT_EQ(r.status, 0) << r.err;
  // A core is one CPU, or several with hyper-threads: each rank uses all of its own.
  const std::regex line("placement: host [^:]+: rank 0 \\(tp 0, pp 0, dp 0\\) local 0 threads (\\d+), "
                        "rank 1 \\(tp 1, pp 0, dp 0\\) local 1 threads (\\d+); "
                        "threads from the affinity mask \\((\\d+) CPUs? ÷ 1 rank\\)\n");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(r.err, m, line)) << r.err;
  EXPECT_EQ(m[1], m[3]);
  EXPECT_EQ(m[2], m[3]);
}

/// 4 ranks of generate --tp 2 --pp 2, each in its own UTS namespace named by `host_of_rank`
/// (a shell expression of $OMPI_COMM_WORLD_RANK): "hosts" told apart by name alone, as
/// network namespaces are in the two-host tests.
test::RunResult on_named_hosts(const std::string& host_of_rank, const std::string& env) {
  return test::run_olmo2_with(
      std::string(OLMO2_MPIEXEC) + " -np 4 --oversubscribe --allow-run-as-root --bind-to none unshare --uts sh -c '" +
          "hostname " + host_of_rank + " && exec env -u SLURM_CPUS_PER_TASK " + env + " " + OLMO2_BINARY,
      "generate --model " + kModel + " --prompt-ids 1,2 --max-tokens 2 --tp 2 --pp 2'");
}

TEST(PlacementUnderMpirun, TpGroupsAcrossHostsAreWarnedAboutAndBlockPlacementIsNot) {
  if (std::system("unshare --uts true 2>/dev/null") != 0) GTEST_SKIP() << "unshare --uts is not permitted here";
  // Cyclic: even ranks on host a, odd ranks on host b; every TP group spans both.
  auto r = on_named_hosts("pl-a$((OMPI_COMM_WORLD_RANK % 2))", "OMP_NUM_THREADS=1");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string warn = ": its all-reduces cross the network every layer; place TP within a node: "
                           "srun -m block / --ntasks-per-node\n";
  EXPECT_EQ(r.err,
            "placement: host pl-a0: rank 0 (tp 0, pp 0, dp 0) local 0 threads 1, rank 2 (tp 0, pp 1, dp 0) local 1 "
            "threads 1; threads from OMP_NUM_THREADS\n"
            "placement: host pl-a1: rank 1 (tp 1, pp 0, dp 0) local 0 threads 1, rank 3 (tp 1, pp 1, dp 0) local 1 "
            "threads 1; threads from OMP_NUM_THREADS\n"
            "olmo2: warning: TP group {0,1} spans nodes pl-a0, pl-a1" + warn +
            "olmo2: warning: TP group {2,3} spans nodes pl-a0, pl-a1" + warn);
  // Block: ranks 0, 1 on one host, 2, 3 on the other: no warning, and each host's two
  // unbound ranks split the mask (they share it with each other, not with the other host).
  r = on_named_hosts("pl-b$((OMPI_COMM_WORLD_RANK / 2))", "-u OMP_NUM_THREADS");
  ASSERT_EQ(r.status, 0) << r.err;
  const int cpus = cpus_of_this_process();
  const std::string t = " threads " + std::to_string(std::max(1, cpus / 2));
  const std::string from = "; threads from the affinity mask (" + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs") +
                           " ÷ 2 ranks)\n";
  EXPECT_EQ(r.err, "placement: host pl-b0: rank 0 (tp 0, pp 0, dp 0) local 0" + t +
                       ", rank 1 (tp 1, pp 0, dp 0) local 1" + t + from +
                       "placement: host pl-b1: rank 2 (tp 0, pp 1, dp 0) local 0" + t +
                       ", rank 3 (tp 1, pp 1, dp 0) local 1" + t + from);
}

TEST(PlacementUnderMpirun, AnInvalidSettingOnOneRankStopsEveryRankWithOneMessage) {
  const std::string common = " --oversubscribe --allow-run-as-root ";
  const std::string args = " generate --model " + kModel + " --prompt-ids 1,2 --max-tokens 2 --tp 2 --pp 2";
  const auto r = test::run_olmo2_with(std::string(OLMO2_MPIEXEC) + common + "-np 3 env -u SLURM_CPUS_PER_TASK " +
                                          OLMO2_BINARY + args + " : -np 1 env SLURM_CPUS_PER_TASK='2(x3)'",
                                      std::string(OLMO2_BINARY) + args);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("olmo2: error: rank 3: SLURM_CPUS_PER_TASK=\"2(x3)\" is not a CPU count"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("placement: ")));
  EXPECT_EQ(r.out, "");
}

TEST(PlacementUnderMpirun, OneProcessRefusesAnInvalidSettingToo) {
  const auto r = test::run_olmo2_with("env OMP_NUM_THREADS=0", std::string(OLMO2_BINARY) + " generate --model " +
                                                                   kModel + " --prompt-ids 1,2 --max-tokens 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("olmo2: error: OMP_NUM_THREADS=\"0\" is not a thread count"));
}

}  // namespace
}  // namespace olmo2
