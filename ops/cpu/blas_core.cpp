#include "ops/blas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>

#include "ops/cpu/code_path_choice.h"

namespace olmo2 {

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string blas_core_upgrade() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";
#if defined(__x86_64__) && defined(__GNUC__)
  const std::string core = blas_core_name();
  // OpenBLAS's pre-AVX x86-64 kernel sets (its generic fall-backs).
  for (const char* generic : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Coppermine",
                              "Northwood", "Banias", "Opteron", "Barcelona", "Bobcat", "Unknown"}) {
    if (core == generic) {
      if (ops::detail::cpu_has_avx512()) return "SkylakeX";
      if (ops::detail::cpu_has_avx2_fma()) return "Haswell";
      return "";
    }
  }
#endif
  return "";
}

void restart_with_blas_kernels(char** argv) {
  const std::string core = blas_core_upgrade();
  if (core.empty()) return;
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace olmo2
