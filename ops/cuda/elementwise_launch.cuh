// A grid-stride launch over the elements of a [rows, cols] row-strided region, for the
// element-wise CUDA kernels of ops/cuda/ (docs/architecture.md §2). Internal.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/check.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/runtime.h"

namespace olmo2::ops::cuda::detail {

/// Calls f(r, c) once for every r < rows, c < cols (int64 indices).
template <typename F>
__global__ void for_each_element(int64_t rows, int64_t cols, F f) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    f(r, i - r * cols);
  }
}

/// Enqueues for_each_element on the compute stream (nothing for an empty region);
/// `name` names the kernel in a launch error.
template <typename F>
void launch_elements(const char* name, int64_t rows, int64_t cols, F f) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((rows * cols + kThreads - 1) / kThreads, 65535);
  OLMO2_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, compute_stream(), for_each_element<F>)(rows, cols, f);
  check_launch(name, __FILE__, __LINE__);
}

}  // namespace olmo2::ops::cuda::detail
