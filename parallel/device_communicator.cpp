// The choice of a group's device communicator (parallel/device_communicator.h).
#include "parallel/device_communicator.h"

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "ops/device_emulation.h"
#include "parallel/emulated_device_communicator.h"
#include "parallel/node_ranks.h"
#include "parallel/string_gather.h"

#ifdef OLMO2_HAVE_CUDA
#include "parallel/host_staged_communicator.h"
#include "parallel/nccl_communicator.h"
#endif

namespace olmo2::parallel {

GpuPlacement gpu_placement(Communicator& group, const std::string& gpu_id) {
  const uint64_t mine[2] = {fnv1a64(host_name()), fnv1a64(gpu_id)};
  const std::vector<std::string> ids = all_gather_strings(group, gpu_id);
  std::vector<uint64_t> all(2 * static_cast<size_t>(group.size()));
  group.all_gather(std::span<const uint64_t>(mine, 2), all);
  GpuPlacement p;
  for (int r = 0; r < group.size() && p.distinct; ++r) {
    int sharing = 1;
    for (int q = r + 1; q < group.size(); ++q) {
      if (all[2 * q] == all[2 * r] && all[2 * q + 1] == all[2 * r + 1]) ++sharing;
    }
    if (sharing > 1) {
      p.distinct = false;
      p.description = detail::concat("host-staged MPI (", sharing, " ranks share GPU ", ids[static_cast<size_t>(r)], ")");
    }
  }
  if (p.distinct) p.description = "NCCL";
  return p;
}

std::string shared_gpu_refusal(const std::vector<std::string>& hosts, const std::vector<std::string>& gpu_ids,
                               bool share_gpu) {
  if (share_gpu) return "";
  for (size_t r = 0; r < hosts.size(); ++r) {
    for (size_t q = r + 1; q < hosts.size(); ++q) {
      if (hosts[q] == hosts[r] && gpu_ids[q] == gpu_ids[r]) {
        return detail::concat("ranks ", r, " and ", q, " on ", hosts[r], " would share GPU ", gpu_ids[r],
                              ": start at most one rank per GPU (check CUDA_VISIBLE_DEVICES; --share-gpu allows it, "
                              "for testing)");
      }
    }
  }
  return "";
}

std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<Communicator> group, bool distinct_gpus) {
  if (!group) OLMO2_THROW(Error, "make_device_communicator: null group communicator");
  auto* mpi = dynamic_cast<MpiCommunicator*>(group.get());
  if (!mpi) {
    OLMO2_THROW(Error, "make_device_communicator: group ", group->name(),
                " is not an MPI communicator (a device communicator bootstraps over MPI)");
  }
  group.release();
  return make_device_communicator(std::unique_ptr<MpiCommunicator>(mpi), distinct_gpus);
}

std::unique_ptr<Communicator> make_device_communicator(std::unique_ptr<MpiCommunicator> group,
                                                       bool distinct_gpus) {
  if (!group) OLMO2_THROW(Error, "make_device_communicator: null MPI group communicator");
  // An emulated device's views are host memory: MPI carries them (no NCCL, no staging).
  if (ops::device_emulated()) return std::make_unique<EmulatedDeviceCommunicator>(std::move(group));
#ifdef OLMO2_HAVE_CUDA
  if (distinct_gpus) return std::make_unique<NcclCommunicator>(std::move(group));
  return std::make_unique<HostStagedCommunicator>(std::move(group));
#else
  (void)distinct_gpus;
  OLMO2_THROW(Error, "no device communicator for group ", group->name(),
              ": this build has no CUDA backend (nvcc was not found)");
#endif
}

}  // namespace olmo2::parallel
