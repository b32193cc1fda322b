// Which communicator carries a process group's device tensors: NCCL when the group's
// ranks have a GPU each, host-staged MPI when some share one (docs/architecture.md §6).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace olmo2::parallel {

/// Where a group's ranks run, as far as NCCL cares.
struct GpuPlacement {
  /// True when no two ranks of the group use the same GPU of the same host.
  bool distinct = true;
  /// For the start-up log: "NCCL" or e.g. "host-staged MPI (2 ranks share GPU
  /// 0000:3B:00.0)" (the first shared GPU in group-rank order, by its PCI bus id).
  std::string description;
};

/// Whether the ranks of `group` have distinct GPUs: one all-gather over `group` of each
/// rank's (FNV-1a hash of its host name, FNV-1a hash of `gpu_id`), as u64 words,
/// compared exactly (collisions have probability 2^-64). `gpu_id` says which physical
/// GPU this rank uses (ops::gpu_identity: its PCI bus id), so that ranks each shown one GPU
/// by their own CUDA_VISIBLE_DEVICES — every one "GPU 0" — count as distinct, and two
/// ordinals that name one GPU as shared. Collective over `group`; the result is the same
/// on every rank; the description names the shared GPU by `gpu_id`.
GpuPlacement gpu_placement(Communicator& group, const std::string& gpu_id);

/// The refusal when ranks of one host would use one GPU without --share-gpu ("ranks 0
/// and 1 on node17 would share GPU 0000:3B:00.0: …"), or "" when none do or `share_gpu`.
/// `hosts[r]`, `gpu_ids[r]`: world rank r's host name and ops::gpu_identity.
std::string shared_gpu_refusal(const std::vector<std::string>& hosts, const std::vector<std::string>& gpu_ids,
                               bool share_gpu);

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
