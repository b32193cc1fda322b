#include "parallel/mpi_runtime.h"

#include <mpi.h>

#include <cstdlib>

#include "core/error.h"

namespace olmo2::parallel {

namespace {

int to_mpi(ThreadLevel level) {
  switch (level) {
    case ThreadLevel::single:
      return MPI_THREAD_SINGLE;
    case ThreadLevel::funneled:
      return MPI_THREAD_FUNNELED;
    case ThreadLevel::serialized:
      return MPI_THREAD_SERIALIZED;
    case ThreadLevel::multiple:
      return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

ThreadLevel from_mpi(int level) {
  if (level >= MPI_THREAD_MULTIPLE) return ThreadLevel::multiple;
  if (level >= MPI_THREAD_SERIALIZED) return ThreadLevel::serialized;
  if (level >= MPI_THREAD_FUNNELED) return ThreadLevel::funneled;
  return ThreadLevel::single;
}

}  // namespace

const char* to_string(ThreadLevel level) {
  switch (level) {
    case ThreadLevel::single:
      return "single";
    case ThreadLevel::funneled:
      return "funneled";
    case ThreadLevel::serialized:
      return "serialized";
    case ThreadLevel::multiple:
      return "multiple";
  }
  return "unknown";
}

MpiRuntime::MpiRuntime(ThreadLevel required) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) OLMO2_THROW(Error, "MPI was already finalised: it cannot be initialised again");
  int initialized = 0;
  MPI_Initialized(&initialized);
  was_initialized_ = initialized != 0;
  int provided = MPI_THREAD_SINGLE;
  if (was_initialized_) {
    MPI_Query_thread(&provided);
  } else {
    const int rc = MPI_Init_thread(nullptr, nullptr, to_mpi(required), &provided);
    if (rc != MPI_SUCCESS) OLMO2_THROW(Error, "MPI_Init_thread failed with error ", rc);
  }
  thread_level_ = from_mpi(provided);
  if (thread_level_ < required) {
    if (!was_initialized_) MPI_Finalize();
    OLMO2_THROW(Error, "MPI provides thread support '", to_string(thread_level_), "', need '",
                to_string(required), "'");
  }
  // Errors that Open MPI reports on the world communicator (a failed sub-request of a
  // non-blocking collective on a group) come back as return codes, which the
  // communicators turn into an Error naming the call and group, instead of aborting.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

void MpiRuntime::barrier() const { MPI_Barrier(MPI_COMM_WORLD); }

int MpiRuntime::all_reduce_min(int value) const {
  int out = value;
  MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return out;
}

void MpiRuntime::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps the promise if it did
}

void MpiRuntime::finalize_now() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

MpiRuntime::~MpiRuntime() {
  if (was_initialized_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace olmo2::parallel
