// Norm weights in f32 or bf16 for the CPU kernels that read them as f32.
#pragma once

#include <vector>

#include "core/error.h"
#include "ops/tensor.h"

namespace olmo2::ops::cpu {

/// The values of `w` (a contiguous 1-d CPU view of `d` elements, f32 or bf16) as f32:
/// `w`'s own memory when f32, else widened — exactly — into `*widened`. ShapeError
/// naming `op` for another dtype, shape or layout. A bf16 weight thus gives the bits
/// its f32 widening gives.
inline const float* f32_weights(const TensorView& w, int64_t d, const char* op, std::vector<float>* widened) {
  OLMO2_CHECK(w.dim() == 1 && w.size(0) == d && w.device() == Device::CPU && w.stride(0) == 1 &&
                  (w.dtype() == DType::F32 || w.dtype() == DType::BF16),
              op, ": w must be a contiguous f32 or bf16 CPU vector of ", d, ", got ", w.shape_str(), " ",
              dtype_name(w.dtype()));
  if (w.dtype() == DType::F32) return w.f32();
  widened->resize(static_cast<size_t>(d));
  convert_to_f32(w.data(), DType::BF16, widened->data(), static_cast<size_t>(d));
  return widened->data();
}

}  // namespace olmo2::ops::cpu
