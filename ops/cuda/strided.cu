// Strided element-wise copy, conversion and fill kernels (ops/cuda/strided.h).
#include "ops/cuda/launch.cuh"
#include "ops/cuda/strided.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/reduce.cuh"
#include "ops/cuda/runtime.h"
#include "ops/tensor.h"

namespace olmo2::ops::cuda {
namespace {

enum class Conv { Bits, F32ToBf16, Bf16ToF32, F16ToF32, F16ToBf16 };

template <Conv C, typename In, typename Out>
__device__ __forceinline__ Out convert(In v) {
  if constexpr (C == Conv::Bits) return v;
  else if constexpr (C == Conv::F32ToBf16) return detail::f32_to_bf16_bits(v);
  else if constexpr (C == Conv::Bf16ToF32) return detail::bf16_bits_to_f32(v);
  else if constexpr (C == Conv::F16ToF32) return detail::f16_bits_to_f32(v);
  else return detail::f32_to_bf16_bits(detail::f16_bits_to_f32(v));
}

/// The source and destination element offsets of linear index i (row-major).
__device__ __forceinline__ void offsets(const StridedLayout& l, int64_t i, int64_t* a, int64_t* b) {
  if (l.dims == 1) {
    *a = i * l.src[0], *b = i * l.dst[0];
    return;
  }
  int64_t x = 0, y = 0;
  for (int d = l.dims - 1; d >= 0; --d) {
    const int64_t q = i / l.shape[d], c = i - q * l.shape[d];
    x += c * l.src[d], y += c * l.dst[d];
    i = q;
  }
  *a = x, *b = y;
}

template <Conv C, typename In, typename Out>
__global__ void convert_kernel(const In* src, Out* dst, StridedLayout l) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < l.numel; i += step) {
    int64_t a, b;
    offsets(l, i, &a, &b);
    dst[b] = convert<C, In, Out>(src[a]);
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, T value, StridedLayout l) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < l.numel; i += step) {
    int64_t a, b;
    offsets(l, i, &a, &b);
    dst[b] = value;
  }
}

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {  // grid-stride loops: at most 64 Ki blocks
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16));
}

template <Conv C, typename In, typename Out>
void run(const void* src, void* dst, const StridedLayout& l) {
  OLMO2_LAUNCH(blocks_for(l.numel), kThreads, 0, compute_stream(), convert_kernel<C, In, Out>)(static_cast<const In*>(src),
                                                                                      static_cast<Out*>(dst), l);
  OLMO2_CUDA_CHECK_LAUNCH("convert_kernel");
}

}  // namespace

StridedLayout coalesce(const char* op, const std::vector<int64_t>& shape, const std::vector<int64_t>& src_strides,
                       const std::vector<int64_t>& dst_strides) {
  std::vector<int64_t> sh, a, b;  // innermost first while merging
  int64_t numel = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    numel *= shape[k];
    if (shape[k] == 1) continue;
    if (!sh.empty() && a.back() * sh.back() == src_strides[k] && b.back() * sh.back() == dst_strides[k]) {
      sh.back() *= shape[k];  // dimension k continues the inner one in both views
      continue;
    }
    sh.push_back(shape[k]), a.push_back(src_strides[k]), b.push_back(dst_strides[k]);
  }
  if (sh.empty()) sh = {1}, a = {1}, b = {1};
  OLMO2_CHECK(static_cast<int>(sh.size()) <= kMaxCopyDims, op, ": ", sh.size(),
              " dimensions after merging contiguous ones, the CUDA backend handles ", kMaxCopyDims, " (shape ",
              shape_to_string(shape), ")");
  StridedLayout l;
  l.dims = static_cast<int>(sh.size());
  l.numel = numel;
  for (int d = 0; d < l.dims; ++d) {  // back to outermost first
    const size_t k = sh.size() - 1 - static_cast<size_t>(d);
    l.shape[d] = sh[k], l.src[d] = a[k], l.dst[d] = b[k];
  }
  return l;
}

void launch_convert(const void* src, DType s, void* dst, DType d, const StridedLayout& l) {
  if (l.numel == 0) return;
  if (s == d) {
    switch (dtype_size(s)) {
      case 1: return run<Conv::Bits, uint8_t, uint8_t>(src, dst, l);
      case 2: return run<Conv::Bits, uint16_t, uint16_t>(src, dst, l);
      case 4: return run<Conv::Bits, uint32_t, uint32_t>(src, dst, l);
      case 8: return run<Conv::Bits, uint64_t, uint64_t>(src, dst, l);
      default: break;
    }
  } else if (s == DType::F32 && d == DType::BF16) {
    return run<Conv::F32ToBf16, float, uint16_t>(src, dst, l);
  } else if (s == DType::BF16 && d == DType::F32) {
    return run<Conv::Bf16ToF32, uint16_t, float>(src, dst, l);
  } else if (s == DType::F16 && d == DType::F32) {
    return run<Conv::F16ToF32, uint16_t, float>(src, dst, l);
  } else if (s == DType::F16 && d == DType::BF16) {
    return run<Conv::F16ToBf16, uint16_t, uint16_t>(src, dst, l);
  }
  OLMO2_THROW(ShapeError, "copy: ", dtype_name(s), " to ", dtype_name(d), " is not a supported conversion");
}

void launch_fill(void* dst, size_t elem_bytes, uint64_t pattern, const StridedLayout& l) {
  if (l.numel == 0) return;
  const unsigned blocks = blocks_for(l.numel);
  cudaStream_t st = compute_stream();
  switch (elem_bytes) {
    case 1: OLMO2_LAUNCH(blocks, kThreads, 0, st, fill_kernel<uint8_t>)(static_cast<uint8_t*>(dst), static_cast<uint8_t>(pattern), l); break;
    case 2: OLMO2_LAUNCH(blocks, kThreads, 0, st, fill_kernel<uint16_t>)(static_cast<uint16_t*>(dst), static_cast<uint16_t>(pattern), l); break;
    case 4: OLMO2_LAUNCH(blocks, kThreads, 0, st, fill_kernel<uint32_t>)(static_cast<uint32_t*>(dst), static_cast<uint32_t>(pattern), l); break;
    case 8: OLMO2_LAUNCH(blocks, kThreads, 0, st, fill_kernel<uint64_t>)(static_cast<uint64_t*>(dst), pattern, l); break;
    default: OLMO2_THROW(ShapeError, "fill: element size ", elem_bytes);
  }
  OLMO2_CUDA_CHECK_LAUNCH("fill_kernel");
}

}  // namespace olmo2::ops::cuda
