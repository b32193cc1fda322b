// Shared pieces of the GPU op tests (ctest label gpu; docs/architecture.md §10): skip with
// the reason where no GPU is present, move contiguous tensors to and from the device with
// the CUDA runtime directly (so a test does not depend on the ops::copy under test), and
// compare a backend's result with the CPU op's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/device_runtime.h"
#include "ops/dtype.h"
#include "ops/tensor.h"
#include "tests/ops/error_bounds.h"

#ifdef OLMO2_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/runtime.h"
#endif

namespace olmo2::ops::test {

/// Skips the calling test, with the reason, when this build has no CUDA or the process
/// sees no GPU. Use as the first statement of a GPU test.
#ifdef OLMO2_HAVE_CUDA
#define OLMO2_REQUIRE_GPU()                                                       \
  do {                                                                            \
    std::string why_;                                                             \
    if (::olmo2::ops::cuda::device_count(&why_) == 0) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)
#else
#define OLMO2_REQUIRE_GPU() GTEST_SKIP() << "built without CUDA (nvcc not found at configure time)"
#endif

/// Skips the calling test, with the reason, unless Device::CUDA can be computed on: a GPU,
/// or the emulated device (OLMO2_DEVICE_EMULATION=1, ops/device_emulation.h). For tests
/// that reach device memory only through ops (ops::copy), never through the CUDA runtime.
#define OLMO2_REQUIRE_DEVICE()                                                              \
  do {                                                                                      \
    std::string why_;                                                                       \
    if (::olmo2::ops::gpu_count(&why_) == 0) GTEST_SKIP() << "no GPU and no emulation: " << why_; \
  } while (0)

#ifdef OLMO2_HAVE_CUDA
/// A device copy of the contiguous host tensor `host` (same dtype and shape), made with
/// cudaMemcpy after the compute stream is idle. Fails the test on a CUDA error.
inline Tensor to_device(const TensorView& host) {
  EXPECT_TRUE(host.is_contiguous());
  std::vector<int64_t> shape = host.shape();
  Tensor d = Tensor::zeros(shape, host.dtype(), Device::CUDA);
  EXPECT_EQ(cudaStreamSynchronize(ops::cuda::compute_stream()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d.view().data(), host.data(), host.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  // cudaMemcpy from pageable memory may return before the DMA lands, and the compute
  // stream is non-blocking (it does not wait for the legacy default stream).
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d;
}

/// A host copy of the contiguous device tensor `dev`, after the compute stream is idle
/// (so the kernels that wrote it have run, and their errors surface here).
inline Tensor to_host(const TensorView& dev) {
  Tensor h = Tensor::zeros(dev.shape(), dev.dtype());
  const cudaError_t sync = cudaStreamSynchronize(ops::cuda::compute_stream());
  EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorName(sync) << ": " << cudaGetErrorString(sync);
  EXPECT_EQ(cudaMemcpy(h.view().data(), dev.data(), dev.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

/// Fills a device tensor with 0xff bytes (NaN in f32 and bf16), so an output element a
/// kernel forgot to write cannot pass a comparison.
inline void poison(const TensorView& dev) {
  EXPECT_EQ(cudaMemsetAsync(dev.data(), 0xff, dev.bytes(), ops::cuda::compute_stream()), cudaSuccess);
}
#endif

/// The elements of a host f32 or bf16 tensor as f32.
inline std::vector<float> as_f32(const TensorView& h) {
  std::vector<float> v(static_cast<size_t>(h.numel()));
  if (h.dtype() == DType::F32) {
    std::memcpy(v.data(), h.data(), v.size() * sizeof(float));
  } else {
    convert_to_f32(h.data(), h.dtype(), v.data(), v.size());
  }
  return v;
}

/// Expects every element of `got` (the backend's result, on the host) within `bound[i]`
/// of `want` (the CPU op's), with the rules of within_bounds() (tests/ops/error_bounds.h):
/// a NaN or infinity anywhere fails unless `want` has the same one at the same place.
/// `what` names the case in the failure.
inline void expect_close(const TensorView& want, const TensorView& got, const std::vector<double>& bound,
                         const std::string& what) {
  ASSERT_EQ(want.shape(), got.shape()) << what;
  const std::vector<float> a = as_f32(want), b = as_f32(got);
  EXPECT_TRUE(within_bounds(std::vector<double>(a.begin(), a.end()), std::vector<double>(b.begin(), b.end()), bound))
      << what;
}

/// expect_close with the per-element bound rel·|want_i|: for ops whose every element is
/// a few correctly rounded operations on its own inputs, without cancellation (rel 0:
/// bit-exact).
inline void expect_close(const TensorView& want, const TensorView& got, double rel, const std::string& what) {
  const std::vector<float> a = as_f32(want);
  expect_close(want, got, relative_bounds(std::vector<double>(a.begin(), a.end()), rel), what);
}

}  // namespace olmo2::ops::test
