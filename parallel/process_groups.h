// ProcessGroups: the world, TP, CP, DP and PP communicators of this rank, made once at start.
#pragma once

#include <functional>
#include <memory>

#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace olmo2::parallel {

/// This rank's communicators for one topology. Group ranks equal the coordinates:
/// tp->rank() == topology.coords(world->rank()).tp, and likewise for cp, dp and pp.
struct ProcessGroups {
  std::unique_ptr<Communicator> world;  ///< every rank, in world-rank order ("world")
  std::unique_ptr<Communicator> tp;     ///< same cp, dp and pp ("tp")
  std::unique_ptr<Communicator> dp;     ///< same tp, cp and pp ("dp")
  std::unique_ptr<Communicator> pp;     ///< same tp, cp and dp ("pp")
  std::unique_ptr<Communicator> cp;     ///< same tp, dp and pp ("cp"; one rank without context parallelism)
  int local_rank = 0;                   ///< rank among the processes on this node (selects the GPU)
  int local_size = 1;                   ///< number of processes on this node
  Topology topology;

  /// This rank's coordinates.
  Coords coords() const { return topology.coords(world->rank()); }
};

/// Makes the groups of `topology` over MPI_COMM_WORLD: MPI_Comm_dup for "world", then
/// MPI_Comm_split for tp, dp, pp and cp (in that order on every rank, key = world rank), and
/// the node-local rank from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), never from a
/// launcher's environment. Collective over MPI_COMM_WORLD: every rank must call it with
/// the same topology. Every communicator gets `timeout_s` (0 = wait forever).
/// MPI must be initialised (MpiRuntime) and outlive the groups. Throws InputError when
/// topology.world() ≠ the MPI world size or timeout_s < 0 (naming them), Error when MPI
/// fails.
ProcessGroups make_process_groups(const Topology& topology, double timeout_s);

/// A communicator of every rank (MPI_Comm_dup of MPI_COMM_WORLD, named "world") for the
/// checks a job makes before it knows its layout. Collective over MPI_COMM_WORLD; MPI
/// must be initialised. Error when MPI fails, InputError for timeout_s < 0.
std::unique_ptr<Communicator> make_world_communicator(double timeout_s);

/// Makes a communicator of a process group from the one make_process_groups made.
using CommunicatorFactory = std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>)>;

/// The hook that chooses the communicator type of a device backend: replaces world, tp,
/// dp, pp and cp (in that order, the same on every rank) by `make(old)` — e.g. a
/// HostStagedCommunicator around the MPI one for device views, or a NCCL communicator
/// bootstrapped over it. A factory that is collective must be so on every rank.
void wrap_communicators(ProcessGroups& groups, const CommunicatorFactory& make);

}  // namespace olmo2::parallel
