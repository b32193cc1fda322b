// Helpers for the multi-rank tests (run under mpirun, or alone as one rank).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

namespace olmo2::parallel::test {

/// Number of ranks in MPI_COMM_WORLD.
inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// This process's rank in MPI_COMM_WORLD.
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// Runs `f`, which must throw E, and returns its message ("" and a failure otherwise).
template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace olmo2::parallel::test

/// Skips the test (on every rank alike) unless the world has exactly `n` ranks.
#define OLMO2_REQUIRE_WORLD(n)                                                                 \
  do {                                                                                         \
    const int have_ = ::olmo2::parallel::test::world_size();                                   \
    if (have_ != (n)) GTEST_SKIP() << "needs exactly " << (n) << " MPI ranks, have " << have_; \
  } while (0)

/// Skips the test (on every rank alike) unless the world has at least `n` ranks.
#define OLMO2_REQUIRE_WORLD_AT_LEAST(n)                                                        \
  do {                                                                                         \
    const int have_ = ::olmo2::parallel::test::world_size();                                   \
    if (have_ < (n)) GTEST_SKIP() << "needs at least " << (n) << " MPI ranks, have " << have_; \
  } while (0)
