// Exit statuses of the olmo2 binary (docs/architecture.md §12 "Exit status"): the same on
// every rank of a job, so that mpirun and srun report it and a batch script can act on it.
#pragma once

namespace olmo2 {

/// The run did what it was asked: training reached --steps, serve shut down on a signal.
constexpr int kExitFinished = 0;
/// Anything that failed: bad input, a lost rank, a non-finite stop (--on-nonfinite stop).
constexpr int kExitFailed = 1;
/// The command line was refused before any work.
constexpr int kExitUsage = 2;
/// Training stopped early on a signal (SIGTERM, SIGINT, SIGUSR1) after writing the
/// checkpoint of its last step: `--resume auto` continues it. 75 is sysexits.h's
/// EX_TEMPFAIL ("try again later"); deploy/slurm/ requeues on it.
constexpr int kExitStoppedEarly = 75;

}  // namespace olmo2
