// Which code path the bf16-weight products take, for benchmark output (bench/README.md,
// "Against PyTorch"). ops/bf16_gemm.h names it (bf16_gemm_path_name(): avx512bf16, avx2
// or portable) where that header is in the build; a build without it has one path only,
// the portable kernel of ops/cpu/bf16_gemm_portable.cpp.
#pragma once

#include <string>

#if __has_include("ops/bf16_gemm.h")
#include "ops/bf16_gemm.h"
#define OLMO2_BENCH_HAVE_BF16_GEMM_PATH 1
#endif

namespace olmo2::bench {

/// The bf16 product path's name, or a marked "unknown" when this build cannot say.
inline std::string bf16_product_path() {
#ifdef OLMO2_BENCH_HAVE_BF16_GEMM_PATH
  return olmo2::ops::bf16_gemm_path_name();
#else
  // BF16-PATH: no ops/bf16_gemm.h in this build, so no bf16_gemm_path_name() to ask.
  // Builds before it had the portable kernel only; say so without claiming more.
  return "portable? (no ops/bf16_gemm.h in this build: bf16_gemm_path_name() unavailable)";
#endif
}

}  // namespace olmo2::bench
