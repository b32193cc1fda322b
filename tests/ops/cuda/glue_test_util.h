// Shared pieces of the GPU tests of the glue ops and losses (test_copy.cpp,
// test_tensor_ops.cpp, test_loss.cpp): random host tensors with the awkward values of
// each dtype, views into a larger base, poisoned bases, and byte-exact comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "tests/ops/cuda/cuda_test_util.h"

namespace olmo2::ops::test {

/// A host tensor of `shape` and `dtype`: f32 gets N(0, 10²) values after the awkward
/// ones (NaN, ±∞, ±0, bf16 ties to round to even, a subnormal, a value that rounds to
/// ∞ in bf16); every other dtype gets random bits (so bf16 and f16 include NaN, ∞ and
/// subnormal patterns).
inline Tensor random_host(const std::vector<int64_t>& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::zeros(shape, dtype);
  std::mt19937_64 rng(seed);
  if (dtype == DType::F32) {
    static const float special[] = {NAN,         INFINITY, -INFINITY, 0.0f,   -0.0f, 1.00390625f /* 1 + 2^-8 */,
                                    1.01171875f /* 1 + 3·2^-8 */, -1.00390625f, 1e-40f, 3.4e38f};
    std::normal_distribution<float> dist(0.0f, 10.0f);
    auto* p = static_cast<float*>(t.view().data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      p[i] = i < static_cast<int64_t>(std::size(special)) ? special[i] : dist(rng);
    }
  } else {
    auto* p = static_cast<unsigned char*>(t.view().data());
    for (size_t i = 0; i < t.view().bytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  }
  return t;
}

/// A host tensor of 0xff bytes (NaN in f32 and bf16): what a kernel must not touch.
inline Tensor poisoned_host(const std::vector<int64_t>& shape, DType dtype) {
  Tensor t = Tensor::zeros(shape, dtype);
  std::memset(t.view().data(), 0xff, t.view().bytes());
  return t;
}

/// A view of `shape` into `base` at element `offset` with `strides` (row-major when
/// empty), on base's device.
inline TensorView view_into(const Tensor& base, const std::vector<int64_t>& shape, std::vector<int64_t> strides = {},
                            int64_t offset = 0) {
  if (strides.empty()) {
    strides.assign(shape.size(), 1);
    for (size_t k = shape.size(); k-- > 1;) strides[k - 1] = strides[k] * shape[k];
  }
  auto* p = static_cast<char*>(base.view().data()) + offset * static_cast<int64_t>(dtype_size(base.dtype()));
  return TensorView(p, base.dtype(), shape, std::move(strides), base.device());
}

/// Expects the two host tensors to hold the same bytes; names the first differing element.
inline void expect_same_bytes(const Tensor& want, const Tensor& got, const std::string& what) {
  ASSERT_EQ(want.view().bytes(), got.view().bytes()) << what;
  const size_t es = dtype_size(want.dtype()), n = want.view().bytes();
  const auto* a = static_cast<const unsigned char*>(want.view().data());
  const auto* b = static_cast<const unsigned char*>(got.view().data());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) {
      ADD_FAILURE() << what << ": element " << i / es << " differs (byte " << i << ": cpu 0x" << std::hex
                    << int{a[i]} << ", gpu 0x" << int{b[i]} << std::dec << ")";
      return;
    }
  }
}

#ifdef OLMO2_HAVE_CUDA
/// test::to_device, then a device-wide synchronize: its cudaMemcpy from pageable memory
/// runs on the legacy default stream, which the non-blocking compute stream does not
/// wait for, and may return before the DMA has landed.
inline Tensor upload(const TensorView& host) {
  Tensor d = to_device(host);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d;
}
#endif

/// The message of the exception of type E that fn throws, or "no exception".
template <typename E, typename Fn>
std::string error_text(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "no exception";
}

}  // namespace olmo2::ops::test
