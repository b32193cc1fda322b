#include "ops/gpu_setup.h"

#include <cstdio>

#include "core/error.h"

#ifdef OLMO2_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/check.h"
#include "ops/cuda/runtime.h"
#endif

namespace olmo2::ops {

#ifdef OLMO2_HAVE_CUDA

int visible_gpu_count(std::string* why) { return cuda::device_count(why); }

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

int visible_gpu_count(std::string* why) {
  if (why) *why = "this build has no CUDA backend";
  return 0;
}

void use_gpu(int gpu, const std::string& /*error_label*/) {
  OLMO2_THROW(Error, "GPU ", gpu, ": this build has no CUDA backend");
}

std::string gpu_description(int gpu) {
  OLMO2_THROW(Error, "GPU ", gpu, ": this build has no CUDA backend");
}

#endif

}  // namespace olmo2::ops
