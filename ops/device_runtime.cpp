// The device runtime's public face (ops/device_runtime.h): forwards to ops/cuda/runtime.h
// in CUDA builds.
#include "ops/device_runtime.h"

#include "core/error.h"

#ifdef OLMO2_HAVE_CUDA
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
  if (why) *why = "built without CUDA (nvcc not found at configure time)";
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

}  // namespace olmo2::ops
