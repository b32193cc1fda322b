// Thread count for every CPU kernel (OpenMP loops and OpenBLAS).
#pragma once

namespace olmo2 {

/// Sets the number of threads used by CPU kernels and by OpenBLAS. n ≥ 1, else
/// InputError naming n.
void set_num_threads(int n);

/// The current CPU thread count.
int num_threads();

}  // namespace olmo2
