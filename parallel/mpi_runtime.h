// MpiRuntime: RAII initialisation and finalisation of MPI for one process.
#pragma once

namespace olmo2::parallel {

/// MPI's thread-support levels (MPI_THREAD_SINGLE … MPI_THREAD_MULTIPLE), in order.
enum class ThreadLevel { single, funneled, serialized, multiple };

/// "funneled", for messages.
const char* to_string(ThreadLevel level);

/// Initialises MPI (MPI_Init_thread) on construction and finalises it (MPI_Finalize) on
/// destruction, unless MPI was already initialised by someone else, in which case it
/// neither initialises nor finalises. Every communicator must be destroyed before the
/// runtime that initialised MPI. Works under mpirun / srun and as a singleton (one rank,
/// no launcher). The bf16 reduction ops MpiCommunicator creates are freed first thing in
/// MPI_Finalize, whoever calls it (an MPI_COMM_SELF attribute; docs/architecture.md §6
/// (communicators)). Non-copyable.
class MpiRuntime {
 public:
  /// Throws Error when MPI was already finalised, when MPI_Init_thread fails or when the
  /// library provides less thread support than `required`.
  explicit MpiRuntime(ThreadLevel required = ThreadLevel::funneled);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  /// This process's rank in MPI_COMM_WORLD.
  int world_rank() const { return world_rank_; }
  /// Number of processes in MPI_COMM_WORLD.
  int world_size() const { return world_size_; }
  /// True when MPI was initialised before this object (it will not finalise it).
  bool was_initialized() const { return was_initialized_; }
  /// The thread support MPI provides.
  ThreadLevel thread_level() const { return thread_level_; }

  /// Ends every rank of MPI_COMM_WORLD with exit status `code` (MPI_Abort): what the
  /// launcher does after a fatal error on one rank, so that peers blocked in a
  /// collective do not hang.
  [[noreturn]] static void abort(int code);

  /// MPI_Finalize now, whoever initialised MPI, unless it is finalised already: for a
  /// rank about to leave with std::_Exit at an agreed moment (no destructor runs then).
  static void finalize_now();

  /// MPI_Barrier on MPI_COMM_WORLD (e.g. so that rank 0 has printed an error before
  /// the others exit and the launcher ends the job).
  void barrier() const;
  /// MPI_Allreduce (MPI_MIN) of one int over MPI_COMM_WORLD: what every rank learns
  /// before any communicator is made (e.g. the lowest rank whose checks failed).
  int all_reduce_min(int value) const;

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  bool was_initialized_ = false;
  ThreadLevel thread_level_ = ThreadLevel::single;
};

}  // namespace olmo2::parallel
