// The emulated device (ops/device_emulation.h; docs/architecture.md §2, §10).
#include "ops/device_emulation.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace olmo2::ops {

bool device_emulated() {
  static const bool on = [] {
    const char* v = std::getenv("OLMO2_DEVICE_EMULATION");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

TensorView emulated_host_view(const TensorView& v) {
  if (v.device() == Device::CPU) return v;
  if (!device_emulated()) {
    OLMO2_THROW(Error, "a ", device_name(v.device()),
                " view is host memory only under OLMO2_DEVICE_EMULATION=1");
  }
  return TensorView(v.data(), v.dtype(), v.shape(), v.strides(), Device::CPU);
}

}  // namespace olmo2::ops
