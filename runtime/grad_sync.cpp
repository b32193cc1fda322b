#include "runtime/grad_sync.h"

#include <algorithm>
#include <cstring>

#include "ops/error.h"

namespace olmo2 {

void all_reduce_gradients(std::vector<Parameter>& params, parallel::Communicator& dp, int64_t bucket_bytes) {
  if (bucket_bytes < 4) OLMO2_THROW(InputError, "gradient bucket of ", bucket_bytes, " bytes holds no float");
  if (dp.size() == 1) return;
  const int64_t cap = bucket_bytes / 4;
  std::vector<float> bucket;
  bucket.reserve(static_cast<size_t>(cap));
  // Pieces (parameter, first element, count) of the bucket being filled.
  struct Piece {
    float* data;
    int64_t count;
  };
  std::vector<Piece> pieces;
  auto flush = [&] {
    if (bucket.empty()) return;
    dp.all_reduce_sum(bucket);
    size_t at = 0;
    for (const Piece& p : pieces) {
      std::memcpy(p.data, bucket.data() + at, sizeof(float) * static_cast<size_t>(p.count));
      at += static_cast<size_t>(p.count);
    }
    bucket.clear();
    pieces.clear();
  };
  for (Parameter& p : params) {
    float* g = p.grad->f32();
    int64_t left = p.grad->numel();
    while (left > 0) {
      const int64_t take = std::min(left, cap - static_cast<int64_t>(bucket.size()));
      bucket.insert(bucket.end(), g, g + take);
      pieces.push_back({g, take});
      g += take, left -= take;
      if (static_cast<int64_t>(bucket.size()) == cap) flush();
    }
  }
  flush();
}

}  // namespace olmo2
