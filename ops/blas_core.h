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

}  // namespace olmo2
