// Which OpenBLAS kernel set runs the f32 products, and which one this CPU should get
// (docs/architecture.md §2, "OpenBLAS kernels").
#pragma once

#include <string>

namespace olmo2 {

/// The kernel set OpenBLAS chose at load time (openblas_get_corename(): "SkylakeX",
/// "Haswell", "Zen", "Prescott", …), for start-up logs and benchmark output.
std::string blas_core_name();

/// The kernel set to ask OpenBLAS for (through OPENBLAS_CORETYPE, read when the library
/// loads) when it fell back to a generic x86-64 one ("Prescott", "Core2", "Nehalem",
/// "Atom", …) on a CPU it does not know — Debian 12's OpenBLAS 0.3.21 does so on Xeons
/// newer than it and runs SSE3 kernels there at a third of the speed: "SkylakeX" when
/// cpuid reports AVX-512 F, BW, DQ and VL, "Haswell" for AVX2 and FMA. Empty when
/// OpenBLAS already runs an AVX2 or AVX-512 kernel set, or when OPENBLAS_CORETYPE is set
/// (the user's choice wins). Throws nothing.
std::string blas_core_upgrade();

/// Where blas_core_upgrade names a kernel set: starts this program again (execv of
/// /proc/self/exe: same pid, arguments and environment) with OPENBLAS_CORETYPE set to it,
/// which OpenBLAS reads only when it loads. Call first thing in main(), before any thread
/// or MPI starts. Returns (with the generic kernels) when nothing is to be done or the
/// exec fails.
void restart_with_blas_kernels(char** argv);

}  // namespace olmo2
