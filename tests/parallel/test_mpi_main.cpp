// mpi_main's bound on the end of a failed run. The one test fails on purpose, so it is
// disabled: only its ctest entry runs it (--gtest_also_run_disabled_tests, with a short
// OLMO2_MPI_TEST_END_TIMEOUT). Rank 0 fails and leaves the test; rank 1 waits inside the
// test in a collective rank 0 never joins, as a surviving rank of a failed test can.
// mpi_main on rank 0 must say so and abort the job within the limit, not hang.
#include <gtest/gtest.h>
#include <mpi.h>

namespace {

TEST(MpiMain, DISABLED_AFailedRankAbortsAPeerStuckInACollective) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm own = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &own);
  if (rank == 0) FAIL() << "rank 0 fails on purpose and leaves the test";
  MPI_Barrier(own);  // rank 0 never comes: only the abort ends this
}

}  // namespace
