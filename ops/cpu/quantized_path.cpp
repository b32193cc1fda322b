// Which path the quantized-weight products take: cpuid once, OLMO2_QUANT_GEMM once, a
// test override (docs/architecture.md §2 and §3.2, "Quantized weights"). The mechanism
// is the one of the other products (ops/cpu/code_path_choice.h).
#include <array>

#include "core/error.h"
#include "ops/cpu/code_path_choice.h"
#include "ops/cpu/quantized_detail.h"
#include "ops/quantized_linear.h"

namespace olmo2::ops {
namespace {

constexpr std::array<QuantizedPath, 3> kPaths = {QuantizedPath::Avx512Vnni, QuantizedPath::Avx2,
                                                 QuantizedPath::Portable};

detail::CodePathChoice<QuantizedPath, 3>& choice() {
  static detail::CodePathChoice<QuantizedPath, 3> c("OLMO2_QUANT_GEMM", kPaths, &quantized_path_name,
                                                    &quantized_path_available);
  return c;
}

}  // namespace

const char* quantized_path_name(QuantizedPath path) {
  switch (path) {
    case QuantizedPath::Avx512Vnni:
      return "avx512vnni";
    case QuantizedPath::Avx2:
      return "avx2";
    case QuantizedPath::Portable:
      return "portable";
  }
  return "?";
}

bool quantized_path_available(QuantizedPath path) {
  static const bool vnni = detail::cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
  static const bool avx2 = detail::cpu_has_avx2_fma();
  switch (path) {
    case QuantizedPath::Avx512Vnni:
      return vnni;
    case QuantizedPath::Avx2:
      return avx2;
    case QuantizedPath::Portable:
      return true;
  }
  return false;
}

QuantizedPath quantized_path() { return choice().current(); }

void set_quantized_path(QuantizedPath path) { choice().force(path, "set_quantized_path"); }

void reset_quantized_path() { choice().reset(); }

namespace detail {
QuantizedKernel quantized_kernel(QuantizedPath path) {
  OLMO2_CHECK(quantized_path_available(path), "quantized product: this CPU lacks the ",
              quantized_path_name(path), " path");
  switch (path) {
    case QuantizedPath::Avx512Vnni:
      return &quantized_kernel_avx512vnni;
    case QuantizedPath::Avx2:
      return &quantized_kernel_avx2;
    case QuantizedPath::Portable:
      break;
  }
  return &quantized_kernel_portable;
}
}  // namespace detail

}  // namespace olmo2::ops
