// The CUDA kernels against the CPU ones (docs/architecture.md §2; skipped, saying why,
// without a GPU). Every CUDA call is checked, its error named in the failure.
#include <gtest/gtest.h>

#include <random>

#include "ops/cpu/kernels.h"
#include "ops/rmsnorm.h"

#ifdef OLMO2_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace olmo2::ops {
namespace {

#ifdef OLMO2_HAVE_CUDA
bool have_gpu(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    *why = std::string("no CUDA device: ") + (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return false;
  }
  return true;
}

/// Success, or a failure naming the call and CUDA's error (name and text).
::testing::AssertionResult cuda_ok(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << call << " failed: " << cudaGetErrorName(err) << ": " << cudaGetErrorString(err);
}
#define ASSERT_CUDA_OK(call) ASSERT_TRUE(cuda_ok((call), #call))

void rmsnorm_on_gpu_matches_cpu(DType xt, DType wt) {
  SCOPED_TRACE(std::string("x ") + dtype_name(xt) + ", w " + dtype_name(wt));
  const int64_t rows = 37, d = 1000;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  Tensor x = Tensor::zeros({rows, d}, xt), w = Tensor::zeros({d}, wt), y = Tensor::zeros({rows, d}, xt);
  auto fill = [&](Tensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float v = dist(rng);
      if (t.view().dtype() == DType::F32) static_cast<float*>(t.view().data())[i] = v;
      else static_cast<uint16_t*>(t.view().data())[i] = f32_to_bf16(v);
    }
  };
  fill(x), fill(w);
  cpu::rmsnorm(x.view(), w.view(), 1e-6f, y.view());
  Tensor gx = Tensor::zeros({rows, d}, xt, Device::CUDA), gw = Tensor::zeros({d}, wt, Device::CUDA),
         gy = Tensor::zeros({rows, d}, xt, Device::CUDA);
  // The tensors are zero-filled on the non-blocking compute stream, which the legacy
  // default stream below (cudaMemcpy, cudaMemset) neither waits for nor orders after:
  // wait at each switch of stream, or the zeros (or the poison) may land last.
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ASSERT_CUDA_OK(cudaMemcpy(gx.view().data(), x.view().data(), x.view().bytes(), cudaMemcpyHostToDevice));
  ASSERT_CUDA_OK(cudaMemcpy(gw.view().data(), w.view().data(), w.view().bytes(), cudaMemcpyHostToDevice));
  // A NaN where the kernel wrote nothing: an output left unwritten cannot pass.
  ASSERT_CUDA_OK(cudaMemset(gy.view().data(), 0xff, gy.view().bytes()));
  ASSERT_CUDA_OK(cudaDeviceSynchronize());  // the copies and the poison land before the kernel runs
  rmsnorm(gx.view(), gw.view(), 1e-6f, gy.view());
  ASSERT_CUDA_OK(cudaGetLastError());        // the launch
  ASSERT_CUDA_OK(cudaDeviceSynchronize());   // the kernel's run
  Tensor back = Tensor::zeros({rows, d}, xt);
  ASSERT_CUDA_OK(cudaMemcpy(back.view().data(), gy.view().data(), y.view().bytes(), cudaMemcpyDeviceToHost));
  float tol = xt == DType::F32 ? 1e-5f : 1e-2f;
  std::vector<float> a(rows * d), b(rows * d);
  convert_to_f32(y.view().data(), xt, a.data(), a.size());
  convert_to_f32(back.view().data(), xt, b.data(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(a[i]))) << i;
}
#endif

TEST(CudaRmsNorm, MatchesCpu) {
#ifndef OLMO2_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (nvcc not found at configure time)";
#else
  std::string why;
  if (!have_gpu(&why)) GTEST_SKIP() << why;
  ASSERT_NO_FATAL_FAILURE(rmsnorm_on_gpu_matches_cpu(DType::F32, DType::F32));
  ASSERT_NO_FATAL_FAILURE(rmsnorm_on_gpu_matches_cpu(DType::BF16, DType::BF16));
  ASSERT_NO_FATAL_FAILURE(rmsnorm_on_gpu_matches_cpu(DType::BF16, DType::F32));
#endif
}

}  // namespace
}  // namespace olmo2::ops
