// Which path the bf16 products take: cpuid once, OLMO2_BF16_GEMM once, a test override
// (docs/architecture.md §2, "bf16 products").
#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "ops/bf16_gemm.h"
#include "ops/cpu/bf16_gemm_detail.h"

namespace olmo2::ops {
namespace {

constexpr Bf16GemmPath kPaths[] = {Bf16GemmPath::Avx512Bf16, Bf16GemmPath::Avx2,
                                   Bf16GemmPath::Portable};

// The path from the environment or cpuid, or the InputError message for a bad
// OLMO2_BF16_GEMM (thrown at each call rather than once, so that no call goes on
// with a path nobody asked for).
struct Default {
  Bf16GemmPath path = Bf16GemmPath::Portable;
  std::string error;
};

const Default& default_path() {
  static const Default d = [] {
    Default r;
    try {
      r.path =
          detail::choose_bf16_gemm_path(std::getenv("OLMO2_BF16_GEMM"), &bf16_gemm_path_available);
    } catch (const InputError& e) {
      r.error = e.what();
    }
    return r;
  }();
  return d;
}

// -1: no override; else the forced path's index.
std::atomic<int> g_forced{-1};

}  // namespace

const char* bf16_gemm_path_name(Bf16GemmPath path) {
  switch (path) {
    case Bf16GemmPath::Avx512Bf16:
      return "avx512bf16";
    case Bf16GemmPath::Avx2:
      return "avx2";
    case Bf16GemmPath::Portable:
      return "portable";
  }
  return "?";
}

bool bf16_gemm_path_available(Bf16GemmPath path) {
  static const bool avx512bf16 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bf16");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (path) {
    case Bf16GemmPath::Avx512Bf16:
      return avx512bf16;
    case Bf16GemmPath::Avx2:
      return avx2;
    case Bf16GemmPath::Portable:
      return true;
  }
  return false;
}

Bf16GemmPath bf16_gemm_path() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return kPaths[forced];
  const Default& d = default_path();
  if (!d.error.empty()) OLMO2_THROW(InputError, d.error);
  return d.path;
}

const char* bf16_gemm_path_name() { return bf16_gemm_path_name(bf16_gemm_path()); }

void set_bf16_gemm_path(Bf16GemmPath path) {
  OLMO2_CHECK(bf16_gemm_path_available(path), "set_bf16_gemm_path: this CPU lacks the ",
              bf16_gemm_path_name(path), " path");
  for (int i = 0; i < 3; ++i)
    if (kPaths[i] == path) g_forced.store(i, std::memory_order_relaxed);
}

void reset_bf16_gemm_path() { g_forced.store(-1, std::memory_order_relaxed); }

namespace detail {
Bf16GemmPath choose_bf16_gemm_path(const char* env, bool (*available)(Bf16GemmPath)) {
  if (env == nullptr || *env == '\0') {
    for (Bf16GemmPath p : kPaths)
      if (available(p)) return p;
    return Bf16GemmPath::Portable;
  }
  for (Bf16GemmPath p : kPaths) {
    if (std::string(env) != bf16_gemm_path_name(p)) continue;
    if (!available(p))
      OLMO2_THROW(InputError, "OLMO2_BF16_GEMM=", env, ": this CPU lacks the ", env, " path");
    return p;
  }
  OLMO2_THROW(InputError, "OLMO2_BF16_GEMM=", env, ": expected avx512bf16, avx2 or portable");
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
  }
  return bf16_kernel_portable();
}
}  // namespace detail

}  // namespace olmo2::ops
