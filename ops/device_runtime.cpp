// The device runtime's public face (ops/device_runtime.h): forwards to ops/cuda/runtime.h
// in CUDA builds.
#include "ops/device_runtime.h"

#include "core/error.h"
#include "ops/device_emulation.h"

#include <cstdio>

#ifdef OLMO2_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/check.h"
#include "ops/cuda/runtime.h"
#endif

namespace olmo2::ops {

namespace {

// The one GPU of an emulated device (ops/device_emulation.h).
constexpr const char* kEmulatedGpu = "emulated GPU (host memory, OLMO2_DEVICE_EMULATION=1)";

void check_emulated_gpu(int gpu) {
  if (gpu != 0) OLMO2_THROW(InputError, "GPU ", gpu, " is not in [0, 1) (one emulated GPU)");
}

}  // namespace

Stream default_stream(Device device) {
  if (device == Device::CPU) return Stream{};
  if (device_emulated()) return Stream{Device::CUDA, nullptr};  // nothing dereferences it
#ifdef OLMO2_HAVE_CUDA
  return Stream{Device::CUDA, static_cast<void*>(cuda::compute_stream())};
#else
  OLMO2_THROW(Error, "no ", device_name(device), " stream: this build has no CUDA backend (nvcc was not found)");
#endif
}

int gpu_count(std::string* why) {
  if (device_emulated()) return 1;
#ifdef OLMO2_HAVE_CUDA
  return cuda::device_count(why);
#else
  if (why) *why = "this build has no CUDA backend";
  return 0;
#endif
}

int current_gpu() {
  if (device_emulated()) return 0;
#ifdef OLMO2_HAVE_CUDA
  return cuda::current_device();
#else
  OLMO2_THROW(Error, "no current GPU: this build has no CUDA backend (nvcc was not found)");
#endif
}

#ifdef OLMO2_HAVE_CUDA

void use_gpu(int gpu, const std::string& error_label) {
  if (device_emulated()) return check_emulated_gpu(gpu);
  cuda::use_device(gpu);
  cuda::set_error_label(error_label);
}

std::string gpu_identity(int gpu) {
  if (device_emulated()) {
    check_emulated_gpu(gpu);
    return "emulated";
  }
  char bus[32] = {};
  OLMO2_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, static_cast<int>(sizeof bus), gpu));
  return bus;
}

std::string gpu_description(int gpu) {
  if (device_emulated()) {
    check_emulated_gpu(gpu);
    return kEmulatedGpu;
  }
  cudaDeviceProp p{};
  OLMO2_CUDA_CHECK(cudaGetDeviceProperties(&p, gpu));
  const double gib = static_cast<double>(p.totalGlobalMem) / static_cast<double>(1ull << 30);
  char memory[32];
  std::snprintf(memory, sizeof memory, gib >= 10 ? "%.0f GiB" : "%.1f GiB", gib);
  return std::string(p.name) + ", " + memory;
}

#else

void use_gpu(int gpu, const std::string& /*error_label*/) {
  if (device_emulated()) return check_emulated_gpu(gpu);
  OLMO2_THROW(Error, "GPU ", gpu, ": this build has no CUDA backend");
}

std::string gpu_identity(int gpu) {
  if (device_emulated()) {
    check_emulated_gpu(gpu);
    return "emulated";
  }
  OLMO2_THROW(Error, "GPU ", gpu, ": this build has no CUDA backend");
}

std::string gpu_description(int gpu) {
  if (device_emulated()) {
    check_emulated_gpu(gpu);
    return kEmulatedGpu;
  }
  OLMO2_THROW(Error, "GPU ", gpu, ": this build has no CUDA backend");
}

#endif

void release_cached_gpu_memory() {
#ifdef OLMO2_HAVE_CUDA
  if (!device_emulated()) cuda::release_cached_memory();
#endif
}

void set_gpu_cache_limit(size_t bytes) {
#ifdef OLMO2_HAVE_CUDA
  if (!device_emulated()) cuda::set_cache_limit(bytes);
#else
  (void)bytes;
#endif
}

GpuMemory gpu_memory() {
#ifdef OLMO2_HAVE_CUDA
  if (!device_emulated()) {
    const cuda::AllocatorStats s = cuda::allocator_stats();
    return GpuMemory{s.in_use_bytes, s.cached_bytes};
  }
#endif
  return GpuMemory{};
}

void record_gpu_failure(const std::string& what) {
#ifdef OLMO2_HAVE_CUDA
  cuda::record_async_failure(what);
#else
  (void)what;
#endif
}

}  // namespace olmo2::ops
