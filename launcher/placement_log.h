// The launcher's thread and placement set-up for train, generate and serve
// (docs/architecture.md §7 "Placement").
#pragma once

#include <ostream>
#include <string>

#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace olmo2 {

/// A job under MPI: places every rank (parallel::place_ranks, which sets this rank's
/// thread count; `threads_flag` = --threads, 0 when not given), then rank 0 writes the
/// per-node map and any warning of a TP group that spans nodes to `log`, one line each
/// (parallel::describe_placement). Collective over `world`; AgreedError on every rank
/// for an invalid setting on any.
void place_and_log(parallel::Communicator& world, const parallel::Topology& topology, int threads_flag,
                   std::ostream& log);

/// One process without MPI: sets the thread count (parallel::place_single_process) and
/// returns what the start lines of train and serve say of it, as the MPI placement line
/// does for each rank: "1 process on HOST, 2 threads from SLURM_CPUS_PER_TASK" (from the
/// affinity mask: "… from the affinity mask (2 CPUs)"). InputError for an invalid
/// SLURM_CPUS_PER_TASK or OMP_NUM_THREADS.
std::string place_single_process(int threads_flag);

}  // namespace olmo2
