// The device runtime's public face (ops/device_runtime.h): forwards to ops/cuda/runtime.h
// in CUDA builds.
#include "ops/device_runtime.h"

#include "core/error.h"

#include <cstdio>

#ifdef OLMO2_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/check.h"
#include "ops/cuda/runtime.h"
#endif

namespace olmo2::ops {

Stream default_stream(Device device) {
  if (device == Device::CPU) return Stream{};
#ifdef OLMO2_HAVE_CUDA
  return Stream{Device::CUDA, static_cast<void*>(cuda::compute_stream())};
#else
  OLMO2_THROW(Error, "no ", device_name(device), " stream: this build has no CUDA backend (nvcc was not found)");
#endif
}

int gpu_count(std::string* why) {
#ifdef OLMO2_HAVE_CUDA
  return cuda::device_count(why);
#else
  if (why) *why = "this build has no CUDA backend";
  return 0;
#endif
}

int current_gpu() {
#ifdef OLMO2_HAVE_CUDA
  return cuda::current_device();
#else
  OLMO2_THROW(Error, "no current GPU: this build has no CUDA backend (nvcc was not found)");
#endif
}

#ifdef OLMO2_HAVE_CUDA

void use_gpu(int gpu, const std::string& error_label) {
  cuda::use_device(gpu);
  cuda::set_error_label(error_label);
}

std::string gpu_description(int gpu) {
  cudaDeviceProp p{};
  OLMO2_CUDA_CHECK(cudaGetDeviceProperties(&p, gpu));
  const double gib = static_cast<double>(p.totalGlobalMem) / static_cast<double>(1ull << 30);
  char memory[32];
  std::snprintf(memory, sizeof memory, gib >= 10 ? "%.0f GiB" : "%.1f GiB", gib);
  return std::string(p.name) + ", " + memory;
}

#else

void use_gpu(int gpu, const std::string& /*error_label*/) {
  OLMO2_THROW(Error, "GPU ", gpu, ": this build has no CUDA backend");
}

std::string gpu_description(int gpu) { OLMO2_THROW(Error, "GPU ", gpu, ": this build has no CUDA backend"); }

#endif

}  // namespace olmo2::ops
