#include "runtime/model/precision.h"

#include "core/error.h"

namespace olmo2 {

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

Precision parse_precision(const std::string& text, const std::string& what) {
  if (text == "fp32") return Precision::FP32;
  if (text == "bf16") return Precision::BF16;
  OLMO2_THROW(InputError, what, " must be fp32 or bf16, got \"", text, "\"");
}

std::optional<DType> parse_kv_cache_dtype(const std::string& text, const std::string& what) {
  if (text == "auto") return std::nullopt;
  if (text == "bf16") return DType::BF16;
  if (text == "f32") return DType::F32;
  OLMO2_THROW(InputError, what, " must be auto, bf16 or f32, got \"", text, "\"");
}

}  // namespace olmo2
