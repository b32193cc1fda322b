// Weight-quantized matrix products for CPU serving and generation: symmetric group-wise
// int8 and int4 weights with a bf16 scale per group, unpacked in registers, f32
// accumulation (docs/architecture.md §3.2, "Quantized weights").
//
// Contract (the kernels are ops/cpu/quantized_*.cpp; the model's use of them is
// runtime/model/quantized_weights.*):
//  - A weight w [N, K] (HF layout [out, in]) is cut into groups of `group` consecutive
//    elements along K within each row; each group g of row n has one scale
//    s = bf16(max_k |w[n, k]| / qmax) (qmax 127 for int8, 7 for int4; a zero group has
//    scale 0) and values q = clamp(round_half_even(w / s), −qmax, qmax), so
//    w ≈ s · q. The int4 packing of the bytes is the kernels' own (documented with
//    quantize_weight in the .cpp); callers treat `values` as opaque.
//  - linear_quantized is batch-invariant: every element y[m, n] is computed by one fixed
//    sequence of operations whatever M, the row's place in x and the thread count, and
//    every code path (QuantizedPath) gives the same bits — so it serves (as
//    linear_batch_invariant does) and generates with one kernel.
#pragma once

#include <cstdint>

#include "ops/tensor.h"

namespace olmo2::ops {

/// The quantized weight formats.
enum class QuantFormat : uint8_t {
  Int8,  ///< one signed byte per weight, values in [−127, 127]
  Int4,  ///< two weights per byte, values in [−7, 7]
};

/// "int8" or "int4".
const char* quant_format_name(QuantFormat f);

/// One quantized weight matrix [N, K] on the CPU.
struct QuantizedWeight {
  QuantFormat format = QuantFormat::Int8;
  int64_t n = 0, k = 0;  ///< logical shape [N, K]
  int64_t group = 0;     ///< elements per scale along K; divides K
  Tensor values;         ///< U8 bytes: [N, K] for int8, [N, K/2] for int4 (opaque packing)
  Tensor scales;         ///< BF16 [N, K/group]
  bool empty() const { return n == 0; }
  /// Bytes held (values + scales): what one batch-1 product reads.
  int64_t bytes() const;
};

/// Quantizes w [N, K] (f32 or bf16, CPU, contiguous) as the contract above says.
/// Throws ShapeError for another dtype/layout or an empty w, InputError naming the value
/// when `group` does not divide K or is not a multiple of 32 (int4: 32 or 64; int8: any
/// multiple of 32, or K itself for one scale per output channel — so K is a multiple
/// of 32 in every case), and InputError naming the element for a NaN or infinite weight.
/// Threads over rows; the bytes do not depend on the thread count.
QuantizedWeight quantize_weight(const TensorView& w, QuantFormat format, int64_t group);

/// The weight the quantized one stands for, s · q, as an f32 [N, K] tensor (tests,
/// reference products, quality measurements).
Tensor dequantize_weight(const QuantizedWeight& w);

/// y[M, N] = x[M, K] · ŵᵀ with ŵ = dequantize_weight(w): f32 x and y on the CPU,
/// contiguous last dimension, rows may be strided. Batch-invariant (see above). The
/// error bound against x · ŵᵀ in exact arithmetic is documented at the definition and
/// tested. Throws ShapeError on mismatched shapes or dtypes; InputError when
/// OLMO2_QUANT_GEMM names no path or one this CPU lacks.
void linear_quantized(const TensorView& x, const QuantizedWeight& w, const TensorView& y);

/// A code path of linear_quantized; all give the same bits.
enum class QuantizedPath {
  Avx512Vnni,  ///< 512-bit integer dot products (cpuid avx512f, avx512bw, avx512vl, avx512_vnni)
  Avx2,        ///< 256-bit integer multiply-adds (cpuid avx2, fma)
  Portable,    ///< scalar, any CPU
};
/// "avx512vnni", "avx2", "portable" — as OLMO2_QUANT_GEMM spells it.
const char* quantized_path_name(QuantizedPath path);
/// Whether this CPU can run `path` (cpuid, read once). Portable: always.
bool quantized_path_available(QuantizedPath path);
/// The path linear_quantized takes: the one set by set_quantized_path, else the one
/// OLMO2_QUANT_GEMM names (read once), else the fastest this CPU has. Throws InputError
/// naming the value when OLMO2_QUANT_GEMM names no path or one this CPU lacks.
QuantizedPath quantized_path();
/// Forces `path` process-wide (tests, benchmarks). ShapeError when this CPU lacks it.
void set_quantized_path(QuantizedPath path);
/// Undoes set_quantized_path.
void reset_quantized_path();

}  // namespace olmo2::ops
