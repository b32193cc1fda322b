#include "ops/embedding.h"

#include <cstring>

namespace olmo2::ops {

void embedding(const int32_t* ids, int64_t n, const TensorView& table, const TensorView& out) {
  OLMO2_CHECK(table.dim() == 2 && out.dim() == 2 && out.size(0) == n &&
                  out.size(1) == table.size(1),
              "embedding: table ", table.shape_str(), " out ", out.shape_str(), " n ", n);
  const int64_t vocab = table.size(0), h = table.size(1);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      OLMO2_THROW(InputError, "token id ", ids[i], " at position ", i,
                  " is outside the vocabulary [0, ", vocab, ")");
    }
  }
  const float* t = table.f32();
  float* o = out.f32();
#pragma omp parallel for schedule(static) if (n * h > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(o + i * out.stride(0), t + ids[i] * table.stride(0), sizeof(float) * h);
  }
}

}  // namespace olmo2::ops
