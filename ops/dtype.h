// Element types: f32 and bf16 for compute and storage, f16 accepted when loading;
// f64 and the integer types for token ids, positions, counts and exact sums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace olmo2 {

enum class DType : uint8_t { F32, BF16, F16, F64, I32, I64, U8 };

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::F64: case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

/// True for the floating-point types (f32, bf16, f16, f64).
constexpr bool is_floating(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64;
}

/// The DType of a C++ element type (float, double, int32_t, int64_t, uint8_t); other
/// types do not compile.
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }

/// Lower-case name ("f32", "bf16", "f16", "f64", "i32", "i64", "u8").
const char* dtype_name(DType t);

/// Parses a safetensors dtype tag of a floating type ("F32", "BF16", "F16"); false for
/// any other tag (model files hold no other type).
bool dtype_from_safetensors(const std::string& tag, DType* out);

/// The safetensors dtype tag of `t` ("F32", "BF16", "F16", "F64", "I32", "I64", "U8").
const char* dtype_to_safetensors(DType t);

/// bf16 bits → f32 (exact).
inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f32 → bf16 bits, round to nearest even (as torch's `.to(torch.bfloat16)`); NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// Rounds an f32 value to the nearest bf16-representable f32 value.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

/// IEEE half bits → f32 (exact, subnormals and inf/NaN included).
float f16_to_f32(uint16_t bits);

/// Converts `n` elements of type `src_type` (f32, bf16 or f16; ShapeError for another)
/// at `src` to f32 at `dst`.
void convert_to_f32(const void* src, DType src_type, float* dst, size_t n);

/// Converts `n` elements of a floating storage type (f32, bf16, f16) at `src` to f32 or
/// bf16 at `dst` (bf16 rounded to nearest even from the exact f32 value; equal types
/// copy bits). `src` may be unaligned (a file mapping). ShapeError for another pair.
void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

/// Rounds `n` f32 values in place to the precision of `t` (no-op for F32). Lets the
/// fp32 CPU kernels reproduce a reference that stores activations in bf16. ShapeError
/// for a type that is not a compute type (f16, f64, integers).
void round_to_dtype(float* data, size_t n, DType t);

}  // namespace olmo2
