// How many CPU threads one rank uses: the rule of docs/architecture.md §7 "Placement",
// as pure functions of the settings, plus the two readers of this process's settings
// (environment, affinity mask).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace olmo2::parallel {

/// Where a rank's thread count came from, in the order the rule tries them.
enum class ThreadSource { flag, slurm_cpus_per_task, omp_num_threads, affinity };

/// "--threads", "SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS" or "the affinity mask", for messages.
const char* to_string(ThreadSource source);

/// A thread count and its source.
struct ThreadChoice {
  int threads = 1;  ///< ≥ 1
  ThreadSource source = ThreadSource::affinity;
  bool operator==(const ThreadChoice&) const = default;
};

/// The explicit settings of one rank: the command-line flag and the two environment
/// variables, each std::nullopt when absent (an empty variable counts as absent).
struct ThreadSettings {
  int flag = 0;  ///< --threads (0: not given); the launcher has already refused < 0
  std::optional<std::string> slurm_cpus_per_task;  ///< SLURM_CPUS_PER_TASK's value
  std::optional<std::string> omp_num_threads;      ///< OMP_NUM_THREADS's value
};

/// The settings of this process: `flag` and the two variables read with getenv.
ThreadSettings thread_settings_from_environment(int flag);

/// The count fixed by an explicit setting: `flag` when > 0, else SLURM_CPUS_PER_TASK,
/// else OMP_NUM_THREADS; std::nullopt when none is given (the count then comes from the
/// affinity mask, threads_from_affinity).
///
/// SLURM_CPUS_PER_TASK holds a plain count (Slurm writes --cpus-per-task there; the
/// per-node "2(x3)" forms live in SLURM_TASKS_PER_NODE and SLURM_JOB_CPUS_PER_NODE):
/// anything but decimal digits with a value in [1, 65536] — "0", "abc", "2(x3)" — is an
/// InputError naming the variable and the value. OMP_NUM_THREADS is the OpenMP list of
/// per-nesting-level counts ("8" or "8,2"): its first entry is the count, same range;
/// anything else is an InputError naming it. Spaces around entries are allowed. A
/// variable is not read (nor checked) when a setting before it decides. A flag < 0 is
/// an InputError too.
std::optional<ThreadChoice> threads_from_settings(const ThreadSettings& settings);

/// The count derived from the affinity mask: `affinity_cpus` (CPUs this rank may run on)
/// divided by `ranks_sharing_mask` (the ranks of its host with this very mask, itself
/// included), rounded down, at least 1. So ranks that mpirun or srun bound to their own
/// cores each use theirs, and unbound ranks split the node. InputError when either
/// argument is < 1.
int threads_from_affinity(int affinity_cpus, int ranks_sharing_mask);

/// threads_from_settings, else threads_from_affinity: the whole rule for one rank.
ThreadChoice choose_threads(const ThreadSettings& settings, int affinity_cpus, int ranks_sharing_mask);

/// This process's affinity mask (sched_getaffinity of the calling thread): how many CPUs
/// it holds and a 64-bit FNV-1a hash of its bits, equal for equal masks.
struct AffinityMask {
  int cpus = 1;
  uint64_t key = 0;
};

/// Reads this thread's affinity mask (sets of up to 2^20 CPUs). Throws Error naming
/// errno when sched_getaffinity fails.
AffinityMask affinity_mask();

}  // namespace olmo2::parallel
