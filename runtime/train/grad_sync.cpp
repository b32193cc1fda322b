#include "runtime/train/grad_sync.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

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

void all_reduce_doubles(parallel::Communicator* c, std::vector<double>& v) {
  if (!c || c->size() == 1) return;
  c->all_reduce_sum(v);
}

void sum_kv_replica_gradients(std::vector<Parameter>& params, parallel::Communicator& tp) {
  // Layout: per replicated parameter (in list order, the same on every rank of the TP
  // group), a slot of its full size; this rank writes its slice at its offset.
  std::vector<std::pair<Parameter*, int64_t>> slots;  // parameter, offset of its full tensor
  int64_t total = 0;
  for (Parameter& p : params) {
    if (p.kv_replicas <= 1) continue;
    int64_t full = 1;
    for (int64_t d : p.full_shape) full *= d;
    slots.emplace_back(&p, total);
    total += full;
  }
  if (slots.empty() || tp.size() == 1) return;
  std::vector<float> buf(static_cast<size_t>(total), 0.0f);
  for (auto& [p, off] : slots) {  // k/v rows and k_norm elements: a contiguous row range
    const int64_t row = p->full_shape.size() == 2 ? p->full_shape[1] : 1;
    std::memcpy(buf.data() + off + p->shard_begin * row, p->grad->f32(), sizeof(float) * static_cast<size_t>(p->numel()));
  }
  tp.all_reduce_sum(buf);
  for (auto& [p, off] : slots) {
    const int64_t row = p->full_shape.size() == 2 ? p->full_shape[1] : 1;
    std::memcpy(p->grad->f32(), buf.data() + off + p->shard_begin * row, sizeof(float) * static_cast<size_t>(p->numel()));
  }
}

}  // namespace olmo2
