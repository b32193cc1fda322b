// What this GPU can do, measured in the run that reports MFU and decode efficiency
// (bench/README.md, "GPU"): the dense bf16 product peak (cuBLASLt, bf16 inputs, f32
// accumulation, the shape of the largest 1B-model product and a square one) and the
// device-to-device copy bandwidth that bounds batch-1 decode (every weight byte is read
// once per token). Prints a human summary and one JSON line per figure
// ("bench":"olmo2_gpu_peaks"). Without a GPU it prints why and exits 0 with "skipped".
//
//   olmo2_gpu_peaks [--copy-mib 2048] [--reps 20]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/runtime.h"

namespace {

using namespace olmo2::ops::cuda;

struct Timer {
  cudaEvent_t a = nullptr, b = nullptr;
  Timer() {
    OLMO2_CUDA_CHECK(cudaEventCreate(&a));
    OLMO2_CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  void start() { OLMO2_CUDA_CHECK(cudaEventRecord(a, compute_stream())); }
  /// Milliseconds since start(), after the stream reached this point.
  float stop() {
    OLMO2_CUDA_CHECK(cudaEventRecord(b, compute_stream()));
    OLMO2_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    OLMO2_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
  }
};

/// Best TFLOP/s of C[M,N] = A[M,K]·B[K,N] in bf16 with f32 accumulation (row-major
/// operands expressed as column-major Cᵀ = Bᵀ·Aᵀ), over `reps` timed runs after a warm-up.
double bf16_gemm_tflops(int64_t m, int64_t n, int64_t k, int reps) {
  void* a = device_malloc(m * k * 2);
  void* b = device_malloc(k * n * 2);
  void* c = device_malloc(m * n * 4);
  OLMO2_CUDA_CHECK(cudaMemsetAsync(a, 0x3c, m * k * 2, compute_stream()));  // small normal bf16 values
  OLMO2_CUDA_CHECK(cudaMemsetAsync(b, 0x3c, k * n * 2, compute_stream()));
  cublasLtMatmulDesc_t op;
  OLMO2_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lc;
  OLMO2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, k, n));  // Bᵀ col-major = B row-major
  OLMO2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k));
  OLMO2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, n, m, n));
  size_t ws_bytes = 0;
  void* ws = cublaslt_workspace(&ws_bytes);
  cublasLtMatmulPreference_t pref;
  OLMO2_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  OLMO2_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                          sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  OLMO2_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), op, lb, la, lc, lc, pref, 1, &heur, &found));
  if (found == 0) OLMO2_THROW(olmo2::Error, "cuBLASLt has no bf16 algorithm for ", m, "x", n, "x", k);
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    OLMO2_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), op, &alpha, b, lb, a, la, &beta, c, lc, c, lc, &heur.algo,
                                      ws, ws_bytes, compute_stream()));
  };
  run();
  synchronize();
  Timer t;
  float best = 1e30f;
  for (int r = 0; r < reps; ++r) {
    t.start();
    run();
    best = std::min(best, t.stop());
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  device_free(a), device_free(b), device_free(c);
  return 2.0 * m * n * k / (best * 1e-3) / 1e12;
}

/// Best device-to-device copy bandwidth in GB/s, counting bytes read (what a decode
/// step's weight reads are compared with) over `reps` copies of `mib` MiB.
double copy_gbps(int64_t mib, int reps) {
  const size_t bytes = static_cast<size_t>(mib) << 20;
  void* src = device_malloc(bytes);
  void* dst = device_malloc(bytes);
  OLMO2_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_stream()));
  synchronize();
  Timer t;
  float best = 1e30f;
  for (int r = 0; r < reps; ++r) {
    t.start();
    OLMO2_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_stream()));
    best = std::min(best, t.stop());
  }
  device_free(src), device_free(dst);
  return bytes / (best * 1e-3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t copy_mib = 2048;
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--copy-mib") copy_mib = std::atoll(argv[i + 1]);
    else if (f == "--reps") reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: olmo2_gpu_peaks [--copy-mib 2048] [--reps 20]\n");
      return 2;
    }
  }
  if (copy_mib < 1 || reps < 1) {
    std::fprintf(stderr, "olmo2_gpu_peaks: --copy-mib and --reps must be >= 1\n");
    return 2;
  }
  std::string why;
  if (device_count(&why) == 0) {
    std::printf("olmo2_gpu_peaks: skipped (no GPU: %s)\n", why.c_str());
    std::printf("{\"bench\":\"olmo2_gpu_peaks\",\"skipped\":true}\n");
    return 0;
  }
  try {
    use_device(0);
    cudaDeviceProp p{};
    OLMO2_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    std::printf("olmo2_gpu_peaks: %s, %.1f GiB, sm_%d%d\n", p.name, p.totalGlobalMem / 1073741824.0, p.major, p.minor);
    struct Shape { int64_t m, n, k; const char* what; };
    const Shape shapes[] = {{8192, 8192, 8192, "square 8192"},
                            {8192, 16384, 2048, "1B MLP up (8192 tokens)"},
                            {8192, 2048, 8192, "1B MLP down (8192 tokens)"}};
    double peak = 0;
    for (const Shape& s : shapes) {
      const double tf = bf16_gemm_tflops(s.m, s.n, s.k, reps);
      peak = std::max(peak, tf);
      std::printf("  bf16 product %-26s %lldx%lldx%lld: %7.1f TFLOP/s\n", s.what, (long long)s.m, (long long)s.n,
                  (long long)s.k, tf);
      std::printf("{\"bench\":\"olmo2_gpu_peaks\",\"figure\":\"bf16_gemm_tflops\",\"m\":%lld,\"n\":%lld,\"k\":%lld,"
                  "\"value\":%.2f}\n", (long long)s.m, (long long)s.n, (long long)s.k, tf);
    }
    const double bw = copy_gbps(copy_mib, reps);
    std::printf("  device-to-device copy, %lld MiB: %.0f GB/s read (+ the same written)\n", (long long)copy_mib, bw);
    std::printf("{\"bench\":\"olmo2_gpu_peaks\",\"figure\":\"bf16_peak_tflops\",\"value\":%.2f}\n", peak);
    std::printf("{\"bench\":\"olmo2_gpu_peaks\",\"figure\":\"copy_read_gbps\",\"value\":%.1f}\n", bw);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "olmo2_gpu_peaks: %s\n", e.what());
    return 1;
  }
  return 0;
}
