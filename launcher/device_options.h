// Where train, generate and serve run: `--device cpu|cuda` and `--share-gpu`, the refusal
// of a device this process cannot use, and each rank's GPU, chosen from its node-local
// rank (docs/architecture.md §2 the device seam, §4 rank layout, §12 command line).
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "ops/device.h"
#include "parallel/process_groups.h"

namespace olmo2 {

/// What the command line says about the device.
struct DeviceOptions {
  Device device = Device::CPU;  ///< --device cpu|cuda
  /// --share-gpu (testing and small experiments): more ranks on a node than GPUs is
  /// allowed, rank with local index i uses GPU i % n, and collectives go through the
  /// host-staged MPI path instead of NCCL.
  bool share_gpu = false;
};

/// Adds --device and --share-gpu (also accepted in an INI --config file).
void add_device_options(boost::program_options::options_description& d);

/// Reads them. Throws UsageError for a device other than cpu and cuda (naming it), and
/// for --share-gpu without --device cuda.
DeviceOptions read_device_options(const boost::program_options::variables_map& vm);

/// Why this process cannot compute on `device`, or "" when it can. CPU: always "".
/// CUDA: a build without CUDA (`built_with_cuda` false), or `gpus` = 0 with `why` (the
/// reason ops::cuda::device_count gave). A pure function of its arguments, so that both
/// refusals are tested in any build.
std::string device_refusal(Device device, bool built_with_cuda, int gpus, const std::string& why);

/// device_refusal for this build and this process (ops::cuda::device_count); throws
/// UsageError with it, so that the launcher refuses `--device cuda` at once, before MPI
/// starts or anything is read, with one line and the usage status. Calls no CUDA function
/// for Device::CPU.
void check_device_available(Device device);

/// The GPU ordinal of the rank with node-local index `local_rank` of `local_size` ranks,
/// when the process sees `gpus` GPUs: local_rank % gpus (a rank shown one GPU by its own
/// CUDA_VISIBLE_DEVICES takes that one). Whether two ranks then share a physical GPU is
/// decided from the GPUs' identities (parallel::shared_gpu_refusal), not from counts.
/// Throws InputError when gpus < 1 or local_rank is not in [0, local_size).
int gpu_for_local_rank(int local_rank, int local_size, int gpus);

/// The device a process computes on, once chosen.
struct DeviceChoice {
  Device device = Device::CPU;
  int gpu = -1;             ///< CUDA: this process's GPU (its ordinal as this process sees them)
  std::string identity;     ///< CUDA: the GPU's PCI bus id (ops::gpu_identity): which physical GPU
  int gpus = 0;             ///< CUDA: GPUs the process sees
  bool shared = false;      ///< CUDA: some physical GPU serves more than one rank (--share-gpu)
  std::string description;  ///< e.g. "device cuda: GPU 0 of 1 (NVIDIA H200, 139 GiB)"
};

/// Makes this process compute on `o.device`. CPU: nothing to do ("device cpu"). CUDA:
/// picks gpu_for_local_rank(local_rank, local_size, device count), makes it current
/// (ops::cuda::use_device) before any other CUDA work, labels every later CUDA error with
/// "`label` on GPU g" (ops::cuda::set_error_label; label e.g. "rank 3 (tp 1, pp 0, dp 1)")
/// and describes it from cudaGetDeviceProperties and its PCI bus id. Throws InputError as
/// gpu_for_local_rank, UsageError where check_device_available would.
DeviceChoice use_device_of_rank(const DeviceOptions& o, int local_rank, int local_size,
                                const std::string& label);

/// use_device_of_rank for this process: with `groups` null one process ("rank 0 (tp 0,
/// pp 0, dp 0)", local rank 0 of 1); else its node-local rank from the groups
/// (MPI_Comm_split_type, never a launcher's environment), labelled with its world rank
/// and coordinates, decided together (parallel::agree over the world: when any rank
/// cannot take its GPU, every rank throws AgreedError with that rank's message). On CUDA
/// it then replaces the groups' communicators by device ones (make_device_communicator:
/// NCCL where a group's ranks have distinct GPUs, host-staged MPI where some share one)
/// and names each group's path in the description. Collective over groups->world and
/// then over each group.
DeviceChoice use_device_of_rank(const DeviceOptions& o, parallel::ProcessGroups* groups);

}  // namespace olmo2
