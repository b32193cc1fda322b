#include "launcher/device_options.h"

#include <cstdlib>

#include "launcher/options.h"
#include "ops/device_emulation.h"
#include "ops/device_runtime.h"
#include "parallel/agreement.h"
#include "parallel/device_communicator.h"
#include "parallel/node_ranks.h"
#include "parallel/string_gather.h"
#include "runtime/serve/memory_size.h"

namespace olmo2 {

namespace po = boost::program_options;

namespace {
#ifdef OLMO2_HAVE_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif
}  // namespace

void add_device_options(po::options_description& d) {
  d.add_options()("device", po::value<std::string>(),
                  "cpu (default) or cuda: each rank on the GPU of its node-local rank")(
      "share-gpu", po::bool_switch(),
      "for testing and small experiments: allow more ranks on a node than GPUs "
      "(rank i on GPU i % n, collectives host-staged through MPI)");
}

DeviceOptions read_device_options(const po::variables_map& vm) {
  DeviceOptions o;
  if (vm.count("device")) {
    const std::string d = vm["device"].as<std::string>();
    if (d != "cpu" && d != "cuda") {
      OLMO2_THROW(UsageError, "--device must be cpu or cuda, got \"", d, "\"");
    }
    o.device = d == "cuda" ? Device::CUDA : Device::CPU;
  }
  o.share_gpu = vm.count("share-gpu") && vm["share-gpu"].as<bool>();
  if (o.share_gpu && o.device != Device::CUDA) {
    OLMO2_THROW(UsageError, "--share-gpu needs --device cuda");
  }
  return o;
}

std::string device_refusal(Device device, bool built_with_cuda, int gpus, const std::string& why) {
  if (device == Device::CPU) return "";
  if (!built_with_cuda) {
    return "--device cuda: this build has no CUDA backend "
           "(nvcc was not found when it was configured)";
  }
  if (gpus < 1) return "--device cuda: no GPU is available to this process (" + why + ")";
  return "";
}

void check_device_available(Device device) {
  if (device == Device::CPU) return;
  std::string why;
  const int gpus = ops::gpu_count(&why);
  // An emulated device (ops/device_emulation.h) needs no CUDA backend.
  const std::string refusal = device_refusal(device, kBuiltWithCuda || ops::device_emulated(), gpus, why);
  if (!refusal.empty()) OLMO2_THROW(UsageError, refusal);
}

int gpu_for_local_rank(int local_rank, int local_size, int gpus) {
  if (gpus < 1) OLMO2_THROW(InputError, "no GPU to choose from");
  if (local_rank < 0 || local_rank >= local_size) {
    OLMO2_THROW(InputError, "node-local rank ", local_rank, " is not in [0, ", local_size, ")");
  }
  return local_rank % gpus;
}

DeviceChoice use_device_of_rank(const DeviceOptions& o, int local_rank, int local_size,
                                const std::string& label) {
  DeviceChoice c;
  c.device = o.device;
  if (o.device == Device::CPU) {
    c.description = "device cpu";
    return c;
  }
  check_device_available(o.device);
  c.gpus = ops::gpu_count();
  c.gpu = gpu_for_local_rank(local_rank, local_size, c.gpus);
  ops::use_gpu(c.gpu, label + " on GPU " + std::to_string(c.gpu));  // before any other CUDA work
  // OLMO2_GPU_CACHE_LIMIT (e.g. 8GiB): the most the caching allocator keeps cached.
  if (const char* limit = std::getenv("OLMO2_GPU_CACHE_LIMIT"); limit && *limit) {
    ops::set_gpu_cache_limit(static_cast<size_t>(parse_memory_size(limit, "OLMO2_GPU_CACHE_LIMIT")));
  }
  c.identity = ops::gpu_identity(c.gpu);
  c.description = "device cuda: GPU " + std::to_string(c.gpu) + " of " + std::to_string(c.gpus) + " (" +
                  ops::gpu_description(c.gpu) + ", " + c.identity + ")";
  return c;
}

DeviceChoice use_device_of_rank(const DeviceOptions& o, parallel::ProcessGroups* groups) {
  // Every rank has the same options: on the CPU there is nothing to agree on.
  if (!groups || o.device == Device::CPU) {
    return use_device_of_rank(o, 0, 1, "rank 0 (tp 0, pp 0, dp 0)");
  }
  const parallel::Coords c = groups->coords();
  const std::string label = "rank " + std::to_string(groups->world->rank()) + " (tp " +
                            std::to_string(c.tp) + ", pp " + std::to_string(c.pp) + ", dp " +
                            std::to_string(c.dp) + ")";
  DeviceChoice choice;
  parallel::agree(groups->world.get(), [&] {
    choice = use_device_of_rank(o, groups->local_rank, groups->local_size, label);
  });
  // Which physical GPU every rank took (by PCI bus id: ordinals differ under per-rank
  // CUDA_VISIBLE_DEVICES, and two ordinals may name one GPU): two ranks of one host on one
  // GPU only with --share-gpu, refused on every rank alike otherwise.
  const std::vector<std::string> hosts = parallel::all_gather_strings(*groups->world, parallel::host_name());
  const std::vector<std::string> ids = parallel::all_gather_strings(*groups->world, choice.identity);
  const std::string refusal = parallel::shared_gpu_refusal(hosts, ids, o.share_gpu);
  if (!refusal.empty()) OLMO2_THROW(parallel::AgreedError, refusal);
  for (size_t r = 0; r < ids.size(); ++r) {
    if (static_cast<int>(r) != groups->world->rank() && hosts[r] == hosts[static_cast<size_t>(groups->world->rank())] &&
        ids[r] == choice.identity) {
      choice.shared = true;
    }
  }
  if (choice.shared) choice.description += "; its GPU serves other ranks too, collectives host-staged through MPI (--share-gpu)";
  // Each group's collectives on device views: NCCL where its ranks have distinct GPUs,
  // host-staged MPI where some share one (docs/architecture.md §6). Collective over each
  // group, in ProcessGroups' order (world, tp, dp, pp) on every rank.
  std::string paths;
  parallel::wrap_communicators(*groups, [&](std::unique_ptr<parallel::Communicator> c) {
    const parallel::GpuPlacement p = parallel::gpu_placement(*c, choice.identity);
    paths += (paths.empty() ? "" : ", ") + c->name() + " " +
             (ops::device_emulated() ? std::string("MPI (emulated device)") : p.description);
    return parallel::make_device_communicator(std::move(c), p.distinct);
  });
  choice.description += "; collectives: " + paths;
  return choice;
}

}  // namespace olmo2
