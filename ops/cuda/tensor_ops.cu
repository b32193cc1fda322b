// CUDA row gathers and scatters, rounding, scaling and the two fp64 reductions of
// ops/tensor_ops.h (copy and fill: ops/cuda/copy.cpp). Same checks and errors as the
// CPU ops (ops/cpu/tensor_ops.cpp).
//
// The reductions return a host double. sum_squares keeps the CPU's chunking (2^14
// elements per chunk, the chunk sums added to `start` in order on the host) but sums
// inside a chunk in a fixed tree, not left to right; sum_row_norms adds the row norms
// in row order on the host but sums each row's squares in a tree. Both are
// deterministic and agree with the CPU to fp64 rounding (~1e-16 relative per addition).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/reduce.cuh"
#include "ops/cuda/runtime.h"
#include "ops/op_checks.h"

namespace olmo2::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = int64_t{1} << 14;  // sum_squares' chunk, as on the CPU

bool rows_contiguous(const TensorView& v) { return v.dim() == 2 && v.stride(1) == 1; }

/// The shared index check (ops/op_checks.h), on a host copy of the index (one small
/// device → host copy, which waits for the stream: the contract names a bad index before
/// any write).
void check_index(const char* op, const TensorView& index, int64_t n, int64_t bound, bool distinct = false) {
  check_index_view(op, index, n);
  std::vector<int32_t> host(static_cast<size_t>(n));
  if (n > 0) copy(index, TensorView(host.data(), DType::I32, {n}, Device::CPU));
  check_index_values(op, host.data(), n, bound);
  if (distinct) check_index_distinct(op, host.data(), n);  // a repeated row would be a race
}

/// One block per listed row: gather dst[i] ← src[ix[i]], or scatter dst[ix[i]] ← src[i].
template <typename T>
__global__ void move_rows_kernel(const T* src, int64_t src_stride, const int32_t* ix, T* dst, int64_t dst_stride,
                                 int64_t width, bool scatter) {
  const int64_t i = blockIdx.x;
  const int64_t from = scatter ? i : ix[i], to = scatter ? ix[i] : i;
  const T* s = src + from * src_stride;
  T* d = dst + to * dst_stride;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) d[c] = s[c];
}

void move_rows(const TensorView& src, const TensorView& index, const TensorView& dst, int64_t n, bool scatter) {
  if (n == 0 || src.size(1) == 0) return;
  const int64_t w = src.size(1);
  const auto* ix = static_cast<const int32_t*>(index.data());
  const unsigned blocks = static_cast<unsigned>(n);
  cudaStream_t st = compute_stream();
  switch (dtype_size(src.dtype())) {
    case 1:
      OLMO2_LAUNCH(blocks, kThreads, 0, st, move_rows_kernel<uint8_t>)(static_cast<const uint8_t*>(src.data()), src.stride(0), ix,
                                                             static_cast<uint8_t*>(dst.data()), dst.stride(0), w, scatter);
      break;
    case 2:
      OLMO2_LAUNCH(blocks, kThreads, 0, st, move_rows_kernel<uint16_t>)(static_cast<const uint16_t*>(src.data()), src.stride(0),
                                                              ix, static_cast<uint16_t*>(dst.data()), dst.stride(0), w,
                                                              scatter);
      break;
    case 4:
      OLMO2_LAUNCH(blocks, kThreads, 0, st, move_rows_kernel<uint32_t>)(static_cast<const uint32_t*>(src.data()), src.stride(0),
                                                              ix, static_cast<uint32_t*>(dst.data()), dst.stride(0), w,
                                                              scatter);
      break;
    default:
      OLMO2_LAUNCH(blocks, kThreads, 0, st, move_rows_kernel<uint64_t>)(static_cast<const uint64_t*>(src.data()), src.stride(0),
                                                              ix, static_cast<uint64_t*>(dst.data()), dst.stride(0), w,
                                                              scatter);
      break;
  }
  OLMO2_CUDA_CHECK_LAUNCH("move_rows_kernel");
}

/// x[r, c] ← op(x[r, c]) over rows × cols with row stride `stride` (grid-stride loop).
template <typename Op>
__global__ void map_rows_kernel(float* x, int64_t rows, int64_t cols, int64_t stride, Op op) {
  const int64_t n = rows * cols, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t r = rows == 1 ? 0 : i / cols, c = i - r * cols;
    float& v = x[r * stride + c];
    v = op(v);
  }
}

struct RoundBf16 {
  __device__ float operator()(float v) const { return detail::round_bf16(v); }
};
struct Scale {
  float factor;
  __device__ float operator()(float v) const { return v * factor; }
};

template <typename Op>
void map_rows(float* x, int64_t rows, int64_t cols, int64_t stride, Op op, const char* name) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16));
  OLMO2_LAUNCH(blocks, kThreads, 0, compute_stream(), map_rows_kernel<Op>)(x, rows, cols, stride, op);
  OLMO2_CUDA_CHECK_LAUNCH(name);
}

/// partial[c] ← Σ x² over chunk c (kChunk elements) in fp64.
__global__ void chunk_squares_kernel(const float* x, int64_t n, double* partial) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk, end = min(n, begin + kChunk);
  double s = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += static_cast<double>(x[i]) * x[i];
  s = detail::block_reduce(s, detail::Sum{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/// norm[r] ← sqrt(Σ x[r, :]²), the squares summed in fp64.
__global__ void row_norms_kernel(const float* x, int64_t cols, int64_t stride, double* norm) {
  const float* row = x + static_cast<int64_t>(blockIdx.x) * stride;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += static_cast<double>(row[c]) * row[c];
  s = detail::block_reduce(s, detail::Sum{}, 0.0);
  if (threadIdx.x == 0) norm[blockIdx.x] = sqrt(s);
}

/// The n doubles at device `p`, on the host (waits for the stream).
std::vector<double> to_host(const double* p, int64_t n) {
  std::vector<double> h(static_cast<size_t>(n));
  OLMO2_CUDA_CHECK(cudaMemcpyAsync(h.data(), p, h.size() * sizeof(double), cudaMemcpyDeviceToHost, compute_stream()));
  synchronize();
  return h;
}

/// Device scratch from the caching allocator, returned at scope exit.
struct Scratch {
  void* p;
  explicit Scratch(size_t bytes) : p(device_malloc(bytes)) {}
  ~Scratch() { device_free(p); }
};

}  // namespace

void gather_rows(const TensorView& src, const TensorView& index, const TensorView& dst) {
  check_row_pair("gather_rows", src, dst);
  check_index("gather_rows", index, dst.size(0), src.size(0));
  move_rows(src, index, dst, dst.size(0), false);
}

void scatter_rows(const TensorView& src, const TensorView& index, const TensorView& dst) {
  check_row_pair("scatter_rows", src, dst);
  check_index("scatter_rows", index, src.size(0), dst.size(0), /*distinct=*/true);
  move_rows(src, index, dst, src.size(0), true);
}

void round_to(const TensorView& x, DType dtype) {
  check_f32_view("round_to", x);
  if (dtype == DType::F32) return;
  OLMO2_CHECK(dtype == DType::BF16, "round_to: ", dtype_name(dtype), " is not a compute dtype (f32, bf16)");
  auto* p = static_cast<float*>(x.data());
  if (x.is_contiguous()) return map_rows(p, 1, x.numel(), x.numel(), RoundBf16{}, "round_to_kernel");
  OLMO2_CHECK(rows_contiguous(x), "round_to: needs contiguous rows, got ", x.shape_str());
  map_rows(p, x.size(0), x.size(1), x.stride(0), RoundBf16{}, "round_to_kernel");
}

void scale(const TensorView& x, float factor) {
  check_f32_view("scale", x);
  OLMO2_CHECK(x.is_contiguous(), "scale: needs a contiguous view, got ", x.shape_str());
  map_rows(static_cast<float*>(x.data()), 1, x.numel(), x.numel(), Scale{factor}, "scale_kernel");
}

double sum_squares(const TensorView& x, double start) {
  check_f32_view("sum_squares", x);
  OLMO2_CHECK(x.is_contiguous(), "sum_squares: needs a contiguous view, got ", x.shape_str());
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
  if (chunks == 0) return start;
  OLMO2_CHECK(chunks < (int64_t{1} << 31), "sum_squares: ", n, " elements");
  Scratch partial(static_cast<size_t>(chunks) * sizeof(double));
  OLMO2_LAUNCH(static_cast<unsigned>(chunks), kThreads, 0, compute_stream(), chunk_squares_kernel)(
      static_cast<const float*>(x.data()), n, static_cast<double*>(partial.p));
  OLMO2_CUDA_CHECK_LAUNCH("chunk_squares_kernel");
  for (double s : to_host(static_cast<const double*>(partial.p), chunks)) start += s;
  return start;
}

double sum_row_norms(const TensorView& x) {
  check_f32_view("sum_row_norms", x);
  OLMO2_CHECK(rows_contiguous(x), "sum_row_norms: needs a 2-d view with contiguous rows, got ", x.shape_str());
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return 0.0;
  Scratch norms(static_cast<size_t>(rows) * sizeof(double));
  OLMO2_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, compute_stream(), row_norms_kernel)(
      static_cast<const float*>(x.data()), cols, x.stride(0), static_cast<double*>(norms.p));
  OLMO2_CUDA_CHECK_LAUNCH("row_norms_kernel");
  double s = 0.0;
  for (double v : to_host(static_cast<const double*>(norms.p), rows)) s += v;
  return s;
}

}  // namespace olmo2::ops::cuda
