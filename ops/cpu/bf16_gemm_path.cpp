// Which path the bf16 products take: cpuid once, OLMO2_BF16_GEMM once, a test override
// (docs/architecture.md §2, "bf16 products").
#include <array>

#include "core/error.h"
#include "ops/bf16_gemm.h"
#include "ops/cpu/bf16_gemm_detail.h"
#include "ops/cpu/code_path_choice.h"

namespace olmo2::ops {
namespace {

// Fastest first; OneDnn last, so that the fastest available path is never it (it is
// the training products' default only where oneDNN uses AMX: bf16_training_gemm_path).
constexpr std::array<Bf16GemmPath, 4> kPaths = {Bf16GemmPath::Avx512Bf16, Bf16GemmPath::Avx2,
                                                Bf16GemmPath::Portable, Bf16GemmPath::OneDnn};

detail::CodePathChoice<Bf16GemmPath, 4>& choice() {
  static detail::CodePathChoice<Bf16GemmPath, 4> c("OLMO2_BF16_GEMM", kPaths, &bf16_gemm_path_name,
                                                   &bf16_gemm_path_available);
  return c;
}

}  // namespace

const char* bf16_gemm_path_name(Bf16GemmPath path) {
  switch (path) {
    case Bf16GemmPath::Avx512Bf16:
      return "avx512bf16";
    case Bf16GemmPath::Avx2:
      return "avx2";
    case Bf16GemmPath::Portable:
      return "portable";
    case Bf16GemmPath::OneDnn:
      return "onednn";
  }
  return "?";
}

bool bf16_gemm_path_available(Bf16GemmPath path) {
  static const bool avx512bf16 = detail::cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  static const bool avx2 = detail::cpu_has_avx2_fma();
  switch (path) {
    case Bf16GemmPath::Avx512Bf16:
      return avx512bf16;
    case Bf16GemmPath::Avx2:
      return avx2;
    case Bf16GemmPath::Portable:
      return true;
    case Bf16GemmPath::OneDnn:
      return detail::onednn_bf16_matmul_available();
  }
  return false;
}

Bf16GemmPath bf16_gemm_path() {
  const Bf16GemmPath p = choice().current();
  if (p != Bf16GemmPath::OneDnn) return p;
  static const Bf16GemmPath fastest = detail::choose_bf16_gemm_path(nullptr, &bf16_gemm_path_available);
  return fastest;
}

const char* bf16_gemm_path_name() { return bf16_gemm_path_name(bf16_gemm_path()); }

Bf16GemmPath bf16_training_gemm_path() {
  const Bf16GemmPath p = choice().current();
  if (choice().named() || !onednn_uses_amx()) return p;
  return Bf16GemmPath::OneDnn;
}

std::string bf16_training_gemm_path_description() {
  const Bf16GemmPath p = bf16_training_gemm_path();
  if (p != Bf16GemmPath::OneDnn) return bf16_gemm_path_name(p);
  return std::string("onednn (") + onednn_cpu_isa_name() + ")";
}

void set_bf16_gemm_path(Bf16GemmPath path) { choice().force(path, "set_bf16_gemm_path"); }

void reset_bf16_gemm_path() { choice().reset(); }

namespace detail {
Bf16GemmPath choose_bf16_gemm_path(const char* env, bool (*available)(Bf16GemmPath)) {
  return choose_code_path("OLMO2_BF16_GEMM", env, kPaths, &bf16_gemm_path_name, available);
}

const Bf16Kernel& bf16_kernel(Bf16GemmPath path) {
  OLMO2_CHECK(bf16_gemm_path_available(path), "bf16 product: this CPU lacks the ",
              bf16_gemm_path_name(path), " path");
  switch (path) {
    case Bf16GemmPath::Avx512Bf16:
      return bf16_kernel_avx512bf16();
    case Bf16GemmPath::Avx2:
      return bf16_kernel_avx2();
    case Bf16GemmPath::Portable:
      break;
    case Bf16GemmPath::OneDnn:
      OLMO2_THROW(ShapeError, "bf16 product: onednn has no register tiles (detail::linear_onednn)");
  }
  return bf16_kernel_portable();
}
}  // namespace detail

}  // namespace olmo2::ops
