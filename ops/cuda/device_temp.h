// A scoped temporary from the caching allocator (ops/cuda/runtime.h), for the CUDA ops'
// scratch buffers. Internal to ops/cuda/.
#pragma once

#include <cstddef>

#include "ops/cuda/runtime.h"

namespace olmo2::ops::cuda::detail {

/// `bytes` of device memory (none for 0) from device_malloc, returned with device_free
/// when the scope ends, also on an exception. Work enqueued on the compute stream that
/// uses it stays valid after that (the allocator's stream-ordered reuse).
class DeviceTemp {
 public:
  explicit DeviceTemp(size_t bytes) : ptr_(bytes > 0 ? device_malloc(bytes) : nullptr) {}
  ~DeviceTemp() { device_free(ptr_); }
  DeviceTemp(const DeviceTemp&) = delete;
  DeviceTemp& operator=(const DeviceTemp&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_;
};

}  // namespace olmo2::ops::cuda::detail
