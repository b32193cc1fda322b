// main() of the multi-rank test binaries: runs GoogleTest on every rank of
// MPI_COMM_WORLD (or alone, as an MPI singleton). Rank 0 prints the usual report; the
// other ranks print only their failures, prefixed with their rank. The exit status is
// the same on every rank: failure if any rank failed. When every test skipped on every
// rank (no GPU, a world too small) rank 0 says so in one line, which ctest can match. A
// rank that failed does not wait for its peers forever (wait_for_peers).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "parallel/mpi_runtime.h"

namespace {

// Prints failed assertions and failed tests of a rank other than 0.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

// Waits for the two end-of-run collectives. A rank that failed waits at most
// OLMO2_MPI_TEST_END_TIMEOUT seconds (180 by default): a failure can leave a peer inside
// a test, waiting for this rank in a collective it will never join, and the job would
// hang until ctest's limit. Past the deadline it says so and aborts the job (exit 1).
void wait_for_peers(MPI_Request (&reqs)[2], bool failed_here, int rank) {
  const char* env = std::getenv("OLMO2_MPI_TEST_END_TIMEOUT");
  const double limit = env && *env ? std::atof(env) : 180.0;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    MPI_Testall(2, reqs, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (failed_here && limit > 0 && waited > limit) {
      std::fprintf(stderr,
                   "[mpi] rank %d failed and its peers did not finish within %.0f s "
                   "(stuck in a collective this rank left?): aborting the job\n",
                   rank, limit);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

int main(int argc, char** argv) {
  olmo2::parallel::MpiRuntime mpi;  // finalises MPI after every test's groups are gone
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = mpi.world_rank(), size = mpi.world_size();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  // Whether every test that ran skipped, on every rank (ctest's SKIP_REGULAR_EXPRESSION
  // of the GPU binaries matches the line printed then).
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  const int skipped_here =
      unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count() ? 1 : 0;
  int skipped_everywhere = 0;
  std::vector<int> all(size, 0);
  MPI_Request reqs[2];
  MPI_Iallreduce(&skipped_here, &skipped_everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &reqs[0]);
  MPI_Iallgather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD, &reqs[1]);
  wait_for_peers(reqs, failed != 0, rank);
  std::string failing;
  for (int r = 0; r < size; ++r) {
    if (all[r]) failing += (failing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (rank == 0) {
    if (failing.empty() && skipped_everywhere) {
      std::printf("[mpi] every test skipped on all %d rank(s)\n", size);
    } else if (failing.empty()) {
      std::printf("[mpi] all %d rank(s) passed\n", size);
    } else {
      std::printf("[mpi] FAILED on rank(s) %s of %d\n", failing.c_str(), size);
    }
  }
  return failing.empty() ? 0 : 1;
}
