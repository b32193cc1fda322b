#include "ops/dtype.h"

#include "core/error.h"

namespace olmo2 {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "?";
}

const char* dtype_to_safetensors(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

bool dtype_from_safetensors(const std::string& tag, DType* out) {
  if (tag == "F32") *out = DType::F32;
  else if (tag == "BF16") *out = DType::BF16;
  else if (tag == "F16") *out = DType::F16;
  else return false;
  return true;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void convert_to_f32(const void* src, DType src_type, float* dst, size_t n) {
  if (n == 0) return;
  switch (src_type) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16: {
      const auto* s = static_cast<const unsigned char*>(src);  // may be unaligned in a file
#pragma omp parallel for schedule(static) if (n > (1u << 16))
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, s + 2 * i, 2);
        dst[i] = bf16_to_f32(b);
      }
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const unsigned char*>(src);
#pragma omp parallel for schedule(static) if (n > (1u << 16))
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, s + 2 * i, 2);
        dst[i] = f16_to_f32(b);
      }
      return;
    }
    default:
      OLMO2_THROW(ShapeError, "convert_to_f32: ", dtype_name(src_type), " is not a floating storage type");
  }
}

void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (dst_type == DType::F32) return convert_to_f32(src, src_type, static_cast<float*>(dst), n);
  OLMO2_CHECK(dst_type == DType::BF16, "convert: to ", dtype_name(dst_type), " is not supported (f32, bf16)");
  if (src_type == DType::BF16) return void(n > 0 ? std::memcpy(dst, src, n * 2) : nullptr);
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  const size_t width = dtype_size(src_type);
  OLMO2_CHECK(src_type == DType::F32 || src_type == DType::F16, "convert: from ", dtype_name(src_type),
              " is not a floating storage type");
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) {
    float f;
    if (src_type == DType::F32) {
      std::memcpy(&f, s + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      f = f16_to_f32(h);
    }
    const uint16_t b = f32_to_bf16(f);
    std::memcpy(d + 2 * i, &b, 2);
  }
  (void)width;
}

void round_to_dtype(float* data, size_t n, DType t) {
  if (t == DType::F32) return;
  if (t == DType::BF16) {
#pragma omp parallel for schedule(static) if (n > (1u << 16))
    for (size_t i = 0; i < n; ++i) data[i] = round_bf16(data[i]);
    return;
  }
  OLMO2_THROW(ShapeError, "round_to_dtype: ", dtype_name(t), " is not a compute dtype (f32, bf16)");
}

}  // namespace olmo2
