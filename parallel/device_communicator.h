// Which communicator carries a process group's device tensors: NCCL when the group's
// ranks have a GPU each, host-staged MPI when some share one (docs/architecture.md §6).
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace olmo2::parallel {

/// Where a group's ranks run, as far as NCCL cares.
struct GpuPlacement {
  /// True when no two ranks of the group use the same GPU of the same host.
  bool distinct = true;
  /// For the start-up log: "NCCL" or e.g. "host-staged MPI (2 ranks share GPU 0)" (the
  /// first shared GPU in group-rank order).
  std::string description;
};

/// Whether the ranks of `group` have distinct GPUs: one all-gather over `group` of each
/// rank's (FNV-1a hash of its host name, `gpu`), as u64 words, compared exactly (two
/// host names collide with probability 2^-64). Collective over `group`; the result is
/// the same on every rank. `gpu` is this rank's CUDA device ordinal (ops::current_gpu()).
GpuPlacement gpu_placement(Communicator& group, int gpu);

/// The communicator for `group`'s device views: NcclCommunicator when `distinct_gpus`
/// (gpu_placement(...).distinct), else HostStagedCommunicator; under device emulation
/// (ops/device_emulation.h) EmulatedDeviceCommunicator whatever `distinct_gpus`. Each
/// takes `group` and
/// serves host views through it too. Every rank of the group must pass the same
/// `distinct_gpus`. Making a NcclCommunicator is collective over the group: make the
/// groups' device communicators in the same order on every rank (ProcessGroups' order:
/// world, tp, dp, pp). Throws Error in a build without CUDA (unless emulated), when
/// `group` is null, and
/// as the chosen constructor throws.
std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<MpiCommunicator> group,
                                                       bool distinct_gpus);

/// The same for a communicator of ProcessGroups (what wrap_communicators hands its
/// factory): `group` must be an MpiCommunicator (make_process_groups makes them so);
/// Error naming the group otherwise.
std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> group, bool distinct_gpus);

}  // namespace olmo2::parallel
