// Kernel launch and dynamic shared memory, written once for both builds of ops/cuda/
// (docs/architecture.md §10): nvcc's <<<…>>> and extern __shared__, or the SIMT
// executor's launch and per-block buffer when OLMO2_CUDA_ON_CPU compiles the kernels as
// host C++.
//
//   OLMO2_LAUNCH(grid, block, shared_bytes, stream, kernel)(arguments...);
//   OLMO2_DYNAMIC_SHARED(float, smem);  // inside a kernel: float smem[] of the launch's size
#pragma once

#include <cuda_runtime.h>

#if defined(OLMO2_CUDA_ON_CPU)
#include "ops/simt/launch.h"
#define OLMO2_LAUNCH_LINE_(line) #line
#define OLMO2_LAUNCH_LINE(line) OLMO2_LAUNCH_LINE_(line)
// The launch's name: the kernel expression and its site (the executor's errors and
// launch counts name it).
#define OLMO2_LAUNCH(grid, block, shared_bytes, stream, ...)                                                 \
  ::olmo2::simt::Launch((grid), (block), (shared_bytes), (stream),                                          \
                        #__VA_ARGS__ " at " __FILE__ ":" OLMO2_LAUNCH_LINE(__LINE__), __VA_ARGS__)
#define OLMO2_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::olmo2::simt::dynamic_shared())
#else
#define OLMO2_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<(grid), (block), (shared_bytes), (stream)>>>
#define OLMO2_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif
