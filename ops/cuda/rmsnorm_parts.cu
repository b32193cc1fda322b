// The split RMSNorm of the tensor-parallel QK-norm and the RMSNorm backward, on CUDA
// (ops/rmsnorm.h: rmsnorm_partials, rmsnorm_apply; ops/backward.h: rmsnorm_backward and
// its two halves; docs/architecture.md §2). Row sums: one block per row, fp32, a warp-
// shuffle tree (their order differs from the CPU's sequential sum, so those differ in
// the last bits). The per-element formulas round each operation as the CPU code does.
// The weight gradient is deterministic: fixed chunks of kChunkRows rows give partial
// sums, added to dw in chunk order by a second kernel (no atomics).
#include <cuda_bf16.h>

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/device_temp.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/runtime.h"
#include "ops/rmsnorm.h"

namespace olmo2::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunkRows = 64;

__device__ inline float ld_f32(const float* p, int64_t i) { return p[i]; }
__device__ inline float ld_f32(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }

// Sums `v` over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets it.
__device__ float block_sum(float v, float* scratch /* [33] */) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < (blockDim.x >> 5) ? scratch[threadIdx.x] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (threadIdx.x == 0) scratch[32] = v;
  }
  __syncthreads();
  const float total = scratch[32];
  __syncthreads();  // scratch is reused by the next call
  return total;
}

// sumsq[t] = Σ x²; with dy: dot[t] = Σ (dy·w)·x. One block per row.
template <typename W, bool kDot>
__global__ void partials_kernel(const float* x, int64_t ldx, int64_t d, const W* w, const float* dy, int64_t lddy,
                                float* sumsq, int64_t ss_stride, float* dot, int64_t dot_stride) {
  __shared__ float scratch[33];
  const int64_t t = blockIdx.x;
  const float* xr = x + t * ldx;
  float ss = 0.0f, dt = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float xi = xr[i];
    ss += xi * xi;
    if constexpr (kDot) dt += __fmul_rn(dy[t * lddy + i], ld_f32(w, i)) * xi;
  }
  ss = block_sum(ss, scratch);
  if constexpr (kDot) dt = block_sum(dt, scratch);
  if (threadIdx.x == 0) {
    sumsq[t * ss_stride] = ss;
    if constexpr (kDot) dot[t * dot_stride] = dt;
  }
}

// y = w·(x·inv), inv = 1/sqrt(sumsq/d_total + eps) (y may be x).
template <typename W>
__global__ void apply_kernel(const float* x, int64_t ldx, const W* w, const float* sumsq, int64_t ss_stride,
                             float d_total, float eps, float* y, int64_t ldy, int64_t rows, int64_t d) {
  const int64_t total = rows * d;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / d, i = e - t * d;
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sumsq[t * ss_stride], d_total), eps)));
    y[t * ldy + i] = __fmul_rn(ld_f32(w, i), __fmul_rn(x[t * ldx + i], inv));
  }
}

struct FinishArgs {
  const float *x, *dy, *sumsq, *dot;
  int64_t ldx, lddy, lddx, ss_stride, dot_stride, rows, d;
  float* dx;
  float* dw_part;  // [chunks, d] or null
  float inv_d, eps;
};

// Column i of one chunk of rows: dx (overwritten) and the chunk's Σ dy·x·r for dw.
template <typename W>
__global__ void finish_kernel(FinishArgs a, const W* w) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= a.d) return;
  const float wi = ld_f32(w, i);
  const int64_t chunks = (a.rows + kChunkRows - 1) / kChunkRows;
  for (int64_t c = blockIdx.y; c < chunks; c += gridDim.y) {
    float part = 0.0f;
    const int64_t end = (c + 1) * kChunkRows < a.rows ? (c + 1) * kChunkRows : a.rows;
    for (int64_t t = c * kChunkRows; t < end; ++t) {
      const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fmul_rn(a.sumsq[t * a.ss_stride], a.inv_d), a.eps)));
      const float cc = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(r, r), r), a.dot[t * a.dot_stride]), a.inv_d);
      const float xi = a.x[t * a.ldx + i], gi = a.dy[t * a.lddy + i];  // read before dx (may alias) is written
      part = __fadd_rn(part, __fmul_rn(__fmul_rn(gi, xi), r));
      a.dx[t * a.lddx + i] = __fsub_rn(__fmul_rn(__fmul_rn(r, wi), gi), __fmul_rn(xi, cc));
    }
    if (a.dw_part) a.dw_part[c * a.d + i] = part;
  }
}

// dw[i] += Σ_c part[c, i], in chunk order.
__global__ void add_chunks_kernel(const float* part, int64_t chunks, int64_t d, float* dw) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= d) return;
  float acc = dw[i];
  for (int64_t c = 0; c < chunks; ++c) acc = __fadd_rn(acc, part[c * d + i]);
  dw[i] = acc;
}

unsigned grid_1d(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads)); }

const float* f32p(const TensorView& t) { return static_cast<const float*>(t.data()); }

void check_rows(const TensorView& t, const char* op, const char* name) {
  OLMO2_CHECK(t.dim() == 2 && t.dtype() == DType::F32 && t.device() == Device::CUDA && t.stride(1) == 1, op, ": ",
              name, " must be a 2-d f32 CUDA view with contiguous rows, got ", t.shape_str());
}
void check_same(const TensorView& a, const TensorView& b, const char* op, const char* name) {
  check_rows(b, op, name);
  OLMO2_CHECK(a.shape() == b.shape(), op, ": ", name, " ", b.shape_str(), " vs ", a.shape_str());
}
void check_stat(const TensorView& s, int64_t rows, const char* op, const char* name) {
  OLMO2_CHECK(s.dim() == 1 && s.size(0) == rows && s.dtype() == DType::F32 && s.device() == Device::CUDA, op, ": ",
              name, " must be an f32 CUDA vector of ", rows, ", got ", s.shape_str());
}
void check_w(const TensorView& w, int64_t d, const char* op) {
  OLMO2_CHECK(w.dim() == 1 && w.size(0) == d && w.device() == Device::CUDA && w.stride(0) == 1 &&
                  (w.dtype() == DType::F32 || w.dtype() == DType::BF16),
              op, ": w must be a contiguous f32 or bf16 CUDA vector of ", d, ", got ", w.shape_str(), " ",
              dtype_name(w.dtype()));
}

template <typename W>
void launch_partials(const TensorView& x, const TensorView& w, const TensorView& dy, const TensorView& sumsq,
                     const TensorView& dot) {
  OLMO2_LAUNCH(static_cast<unsigned>(x.size(0)), kThreads, 0, compute_stream(), partials_kernel<W, true>)(
      f32p(x), x.stride(0), x.size(1), static_cast<const W*>(w.data()), f32p(dy), dy.stride(0),
      static_cast<float*>(sumsq.data()), sumsq.stride(0), static_cast<float*>(dot.data()), dot.stride(0));
  OLMO2_CUDA_CHECK_LAUNCH("rmsnorm_backward_partials");
}

}  // namespace

void rmsnorm_partials(const TensorView& x, const TensorView& sumsq) {
  check_rows(x, "rmsnorm_partials", "x");
  check_stat(sumsq, x.size(0), "rmsnorm_partials", "sumsq");
  if (x.size(0) == 0) return;
  OLMO2_LAUNCH(static_cast<unsigned>(x.size(0)), kThreads, 0, compute_stream(), partials_kernel<float, false>)(
      f32p(x), x.stride(0), x.size(1), nullptr, nullptr, 0, static_cast<float*>(sumsq.data()), sumsq.stride(0),
      nullptr, 0);
  OLMO2_CUDA_CHECK_LAUNCH("rmsnorm_partials");
}

void rmsnorm_apply(const TensorView& x, const TensorView& w, const TensorView& sumsq, int64_t d_total, float eps,
                   const TensorView& y) {
  const auto [rows, d] = rmsnorm_check(x, w, y);
  check_rows(x, "rmsnorm_apply", "x");
  check_stat(sumsq, rows, "rmsnorm_apply", "sumsq");
  OLMO2_CHECK(d_total >= d && d_total > 0, "rmsnorm_apply: global width ", d_total, " for local width ", d);
  check_w(w, d, "rmsnorm_apply");
  if (rows == 0 || d == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(grid_1d(rows * d), 65535));
  const float dt = static_cast<float>(d_total);
  auto* yp = static_cast<float*>(y.data());
  if (w.dtype() == DType::F32)
    OLMO2_LAUNCH(blocks, kThreads, 0, compute_stream(), apply_kernel<float>)(f32p(x), x.stride(0), f32p(w), f32p(sumsq),
                                                            sumsq.stride(0), dt, eps, yp, y.stride(0), rows, d);
  else
    OLMO2_LAUNCH(blocks, kThreads, 0, compute_stream(), apply_kernel<__nv_bfloat16>)(
        f32p(x), x.stride(0), static_cast<const __nv_bfloat16*>(w.data()), f32p(sumsq), sumsq.stride(0), dt, eps, yp,
        y.stride(0), rows, d);
  OLMO2_CUDA_CHECK_LAUNCH("rmsnorm_apply");
}

void rmsnorm_backward_partials(const TensorView& x, const TensorView& w, const TensorView& dy,
                               const TensorView& sumsq, const TensorView& dot) {
  const char* op = "rmsnorm_backward";
  check_rows(x, op, "x");
  check_same(x, dy, op, "dy");
  check_w(w, x.size(1), op);
  check_stat(sumsq, x.size(0), op, "sumsq");
  check_stat(dot, x.size(0), op, "dot");
  if (x.size(0) == 0) return;
  if (w.dtype() == DType::F32) launch_partials<float>(x, w, dy, sumsq, dot);
  else launch_partials<__nv_bfloat16>(x, w, dy, sumsq, dot);
}

void rmsnorm_backward_finish(const TensorView& x, const TensorView& w, float eps, int64_t d_total,
                             const TensorView& dy, const TensorView& sumsq, const TensorView& dot,
                             const TensorView& dx, const TensorView& dw) {
  const char* op = "rmsnorm_backward";
  check_rows(x, op, "x");
  check_same(x, dy, op, "dy");
  check_same(x, dx, op, "dx");
  const int64_t rows = x.size(0), d = x.size(1);
  check_stat(sumsq, rows, op, "sumsq");
  check_stat(dot, rows, op, "dot");
  check_w(w, d, op);
  const bool want_dw = !dw.empty();
  if (want_dw)
    OLMO2_CHECK(dw.dim() == 1 && dw.size(0) == d && dw.dtype() == DType::F32 && dw.device() == Device::CUDA &&
                    dw.stride(0) == 1,
                op, ": dw must be a contiguous f32 CUDA vector of ", d, ", got ", dw.shape_str());
  OLMO2_CHECK(d_total >= d && d_total > 0, op, ": global width ", d_total, " below the local width ", d);
  if (rows == 0 || d == 0) return;
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  const detail::DeviceTemp part(want_dw ? static_cast<size_t>(chunks * d) * sizeof(float) : 0);
  const FinishArgs a{f32p(x), f32p(dy), f32p(sumsq), f32p(dot), x.stride(0), dy.stride(0), dx.stride(0),
                     sumsq.stride(0), dot.stride(0), rows, d, static_cast<float*>(dx.data()), part.as<float>(),
                     1.0f / static_cast<float>(d_total), eps};
  const dim3 grid(grid_1d(d), static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
  if (w.dtype() == DType::F32) OLMO2_LAUNCH(grid, kThreads, 0, compute_stream(), finish_kernel<float>)(a, f32p(w));
  else OLMO2_LAUNCH(grid, kThreads, 0, compute_stream(), finish_kernel<__nv_bfloat16>)(a, static_cast<const __nv_bfloat16*>(w.data()));
  OLMO2_CUDA_CHECK_LAUNCH("rmsnorm_backward_finish");
  if (!want_dw) return;
  OLMO2_LAUNCH(grid_1d(d), kThreads, 0, compute_stream(), add_chunks_kernel)(part.as<float>(), chunks, d,
                                                                   static_cast<float*>(dw.data()));
  OLMO2_CUDA_CHECK_LAUNCH("rmsnorm_backward_finish (dw)");
}

void rmsnorm_backward(const TensorView& x, const TensorView& w, float eps, const TensorView& dy, const TensorView& dx,
                      const TensorView& dw) {
  check_rows(x, "rmsnorm_backward", "x");
  const int64_t rows = x.size(0);
  const detail::DeviceTemp stats(static_cast<size_t>(2 * rows) * sizeof(float));
  const TensorView s(stats.get(), DType::F32, {rows}, {1}, Device::CUDA);
  const TensorView dt(stats.as<float>() + rows, DType::F32, {rows}, {1}, Device::CUDA);
  rmsnorm_backward_partials(x, w, dy, s, dt);
  rmsnorm_backward_finish(x, w, eps, x.size(1), dy, s, dt, dx, dw);
}

}  // namespace olmo2::ops::cuda
