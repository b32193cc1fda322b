// Element-wise copy, conversion and fill over strided device views: the kernels under
// ops::cuda::copy and ops::cuda::fill (ops/cuda/copy.cpp; docs/architecture.md §2).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/dtype.h"

namespace olmo2::ops::cuda {

/// The most dimensions a strided copy handles after coalescing (ShapeError beyond).
inline constexpr int kMaxCopyDims = 8;

/// The iteration space of a strided element-wise op: a row-major shape and, per
/// dimension, the source's and the destination's strides (in elements).
struct StridedLayout {
  int dims = 0;
  int64_t numel = 0;
  int64_t shape[kMaxCopyDims] = {};
  int64_t src[kMaxCopyDims] = {};
  int64_t dst[kMaxCopyDims] = {};
};

/// The layout of `shape` walked with `src_strides` and `dst_strides`, with size-1
/// dimensions dropped and neighbours merged where both views are contiguous across them
/// (a contiguous pair becomes one dimension of stride 1). A 0-d shape is one element.
/// Throws ShapeError (naming `op` and the shape) when more than kMaxCopyDims remain.
StridedLayout coalesce(const char* op, const std::vector<int64_t>& shape, const std::vector<int64_t>& src_strides,
                       const std::vector<int64_t>& dst_strides);

/// dst[l.dst offsets] ← convert(src[l.src offsets]) on the compute stream, for device
/// pointers. (s, d): equal (a bit copy of any dtype), f32 → bf16 (nearest even), bf16 →
/// f32, f16 → f32 or bf16: bit for bit the CPU's conversions (ops/dtype.h).
void launch_convert(const void* src, DType s, void* dst, DType d, const StridedLayout& l);

/// dst[l.dst offsets] ← the element whose bits are the low `elem_bytes` bytes of
/// `pattern`, on the compute stream (elem_bytes 1, 2, 4 or 8).
void launch_fill(void* dst, size_t elem_bytes, uint64_t pattern, const StridedLayout& l);

}  // namespace olmo2::ops::cuda
