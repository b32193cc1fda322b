// The zigzag shard and the pieces ring attention's forward and backward share
// (runtime/model/ring_attention_parts.h; docs/architecture.md §7 "Context parallelism:
// ring attention").
#include "runtime/model/ring_attention_parts.h"

#include <cblas.h>

#include <algorithm>
#include <string>

#include "core/error.h"

namespace olmo2 {

ContextShard zigzag_shard(const std::vector<int64_t>& lengths, int cp) {
  if (cp < 1) OLMO2_THROW(InputError, "context parallelism: cp ", cp, " must be at least 1");
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] <= 0 || lengths[i] % (2 * cp) != 0) {
      OLMO2_THROW(InputError, "context parallelism: sequence ", i, " has length ", lengths[i], ", which cp ", cp,
                  " cannot split: the zigzag order needs a positive multiple of 2·cp = ", 2 * cp);
    }
  }
  ContextShard s;
  s.cp = cp;
  s.lengths = lengths;
  s.seq.resize(static_cast<size_t>(cp));
  s.pos.resize(static_cast<size_t>(cp));
  for (int j = 0; j < cp; ++j) {
    for (const ring_parts::Run& r : ring_parts::runs_of(s, j)) {
      for (int64_t i = 0; i < r.len; ++i) {
        s.seq[static_cast<size_t>(j)].push_back(r.seq);
        s.pos[static_cast<size_t>(j)].push_back(static_cast<int32_t>(r.pos + i));
      }
    }
  }
  return s;
}

int64_t ContextShard::rows(int rank) const {
  OLMO2_CHECK(rank >= 0 && rank < cp, "ContextShard::rows: rank ", rank, " of a CP group of ", cp);
  int64_t n = 0;
  for (int64_t l : lengths) n += l / cp;
  return n;
}

RingHopWork ring_hop_work(const ContextShard& shard, int64_t window, int q_rank, int kv_rank) {
  OLMO2_CHECK(q_rank >= 0 && q_rank < shard.cp && kv_rank >= 0 && kv_rank < shard.cp, "ring_hop_work: ranks ",
              q_rank, ", ", kv_rank, " of a CP group of ", shard.cp);
  RingHopWork w;
  w.computed = static_cast<int64_t>(
      ring_parts::computed_pairs(ring_parts::runs_of(shard, q_rank), ring_parts::runs_of(shard, kv_rank), window,
                                 &w.pairs)
          .size());
  return w;
}

namespace ring_parts {

std::vector<Run> runs_of(const ContextShard& shard, int rank) {
  std::vector<Run> runs;
  int64_t row = 0;
  for (size_t i = 0; i < shard.lengths.size(); ++i) {
    const int64_t chunk = shard.lengths[i] / (2 * shard.cp);
    for (int64_t c : {int64_t{rank}, int64_t{2 * shard.cp - 1 - rank}}) {
      runs.push_back(Run{static_cast<int32_t>(i), c * chunk, row, chunk});
      row += chunk;
    }
  }
  return runs;
}

std::vector<RunPair> computed_pairs(const std::vector<Run>& q_runs, const std::vector<Run>& k_runs,
                                    int64_t window, int64_t* pairs_total) {
  std::vector<RunPair> pairs;
  int64_t total = 0;
  for (const Run& q : q_runs) {
    for (const Run& k : k_runs) {
      if (q.seq != k.seq) continue;
      ++total;
      const int64_t last_q = q.pos + q.len - 1;
      if (k.pos > last_q) continue;  // every key after every query: causal mask
      // The closest (query, key) pair with key ≤ query is q.pos against the run's last key.
      const int64_t nearest = std::max<int64_t>(0, q.pos - (k.pos + k.len - 1));
      if (window > 0 && nearest >= window) continue;  // wholly outside the sliding window
      pairs.push_back(RunPair{q, k});
    }
  }
  if (pairs_total) *pairs_total = total;
  return pairs;
}

int64_t check_shapes(const char* op, const parallel::Communicator& cp, const ContextShard& shard,
                     const TensorView& q, const TensorView& k, const TensorView& v, int n_heads,
                     int n_kv_heads, int64_t window) {
  OLMO2_CHECK(cp.size() == shard.cp, op, ": the CP group has ", cp.size(), " ranks, the shard ", shard.cp);
  OLMO2_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, op, ": heads ", n_heads, " kv heads ",
              n_kv_heads);
  OLMO2_CHECK(window >= 0, op, ": window ", window, " is negative (0 means no window)");
  OLMO2_CHECK(q.dim() == 2 && k.dim() == 2 && v.dim() == 2, op, ": q, k, v must be 2-d");
  const int64_t rows = shard.rows(cp.rank()), hd = q.size(1) / n_heads;
  OLMO2_CHECK(q.size(0) == rows && q.size(1) == hd * n_heads && k.size(0) == rows &&
                  k.size(1) == hd * n_kv_heads && v.shape() == k.shape(),
              op, ": q ", q.shape_str(), " k ", k.shape_str(), " v ", v.shape_str(), " for ", rows,
              " rows of cp rank ", cp.rank(), " and heads ", n_heads, "/", n_kv_heads);
  for (const TensorView* t : {&q, &k, &v}) {
    OLMO2_CHECK(t->dtype() == DType::F32 && t->device() == Device::CPU && t->stride(1) == 1, op,
                ": views must be f32 CPU with contiguous rows");
  }
  return hd;
}

void pack_rows(const TensorView& src, float* dst) {
  const int64_t w = src.size(1);
  for (int64_t r = 0; r < src.size(0); ++r) std::copy_n(src.f32() + r * src.stride(0), w, dst + r * w);
}

void unpack_rows(const float* src, const TensorView& dst) {
  const int64_t w = dst.size(1);
  for (int64_t r = 0; r < dst.size(0); ++r) std::copy_n(src + r * w, w, dst.f32() + r * dst.stride(0));
}

void ring_shift(parallel::Communicator& cp, float* data, int64_t n, int tag, std::vector<float>& spare) {
  const int p = cp.size(), j = cp.rank(), next = (j + 1) % p, prev = (j + p - 1) % p;
  for (int64_t at = 0; at < n; at += kRingPiece) {
    const int64_t len = std::min(kRingPiece, n - at);
    spare.resize(static_cast<size_t>(len));
    const TensorView mine(data + at, DType::F32, {len}), other(spare.data(), DType::F32, {len});
    if (p == 2) {
      cp.send_recv(mine, other, next, tag, tag);
    } else if (j % 2 == 0) {
      cp.send(mine, next, tag);
      cp.recv(mine, prev, tag);  // the piece is sent: its place takes the previous rank's
      continue;
    } else {
      cp.recv(other, prev, tag);
      cp.send(mine, next, tag);
    }
    std::copy_n(spare.data(), len, data + at);
  }
}

void ring_pass(parallel::Communicator& cp, const ContextShard& shard, int64_t window, std::vector<float>& block,
               int64_t moved, int tag, std::vector<float>& spare,
               const std::function<void(const std::vector<RunPair>&)>& visit) {
  const int p = shard.cp, j = cp.rank();
  const std::vector<Run> q_runs = runs_of(shard, j);
  for (int hop = 0; hop < p; ++hop) {
    const std::vector<RunPair> pairs = computed_pairs(q_runs, runs_of(shard, (j - hop + p) % p), window);
    if (!pairs.empty()) visit(pairs);
    if (hop + 1 < p) ring_shift(cp, block.data(), moved, tag, spare);
  }
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace ring_parts
}  // namespace olmo2
