// default_stream (ops/device.h): the one place outside ops/cuda/ that names the CUDA
// compute stream, so that callers above ops/ never include the CUDA runtime.
#include "core/error.h"
#include "ops/device.h"
#ifdef OLMO2_HAVE_CUDA
#include "ops/cuda/runtime.h"
#endif

namespace olmo2 {

Stream default_stream(Device device) {
  if (device == Device::CPU) return Stream{};
#ifdef OLMO2_HAVE_CUDA
  return Stream{Device::CUDA, static_cast<void*>(ops::cuda::compute_stream())};
#else
  OLMO2_THROW(Error, "this build has no CUDA backend: no ", device_name(device), " stream");
#endif
}

}  // namespace olmo2
