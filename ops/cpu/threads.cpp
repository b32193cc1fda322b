#include "ops/threads.h"

#include <cblas.h>
#include <omp.h>

#include "core/error.h"

namespace olmo2 {

void set_num_threads(int n) {
  if (n < 1) OLMO2_THROW(InputError, "thread count must be at least 1, got ", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace olmo2
