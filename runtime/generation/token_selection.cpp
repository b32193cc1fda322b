#include "runtime/generation/token_selection.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>

#include "core/error.h"
#include "ops/tensor_ops.h"
#include "ops/top_candidates.h"

namespace olmo2 {

namespace {
/// Sampling without top_k: every rank sends its whole slice, unsorted.
bool whole_vocabulary(const SelectionRequest& r) { return r.params.temperature > 0 && r.params.top_k == 0; }

/// Candidates each rank sends for a request (the same on every rank).
int64_t candidates_per_rank(const SelectionRequest& r, int64_t slice) {
  int64_t m = 1;
  if (r.params.temperature > 0) m = r.params.top_k > 0 ? std::min(r.params.top_k, slice) : slice;
  return std::min(slice, std::max<int64_t>(m, r.logprobs));
}

/// What each rank sends per row: a header, then m candidates (logit f32, id i32) — the
/// same layout on every rank, all rows in one buffer, carried as bytes.
struct RowHeader {
  float max;      ///< largest real logit of the slice (with logprobs)
  float sum_exp;  ///< Σ exp(x − max) over the slice's real ids (0: not computed)
};
static_assert(sizeof(RowHeader) == 8 && sizeof(Candidate) == 8, "packed 4-byte fields");
RowHeader* header(std::vector<uint8_t>& buf, size_t at) { return reinterpret_cast<RowHeader*>(buf.data() + at); }
Candidate* candidates(std::vector<uint8_t>& buf, size_t at) {
  return reinterpret_cast<Candidate*>(buf.data() + at + sizeof(RowHeader));
}

/// The rows `which` (on the device, none sampling the whole vocabulary, each wanting at
/// most kMaxDeviceTopCandidates): their candidates and statistics made on the device by
/// one ops::top_candidates over all of them, and only these copied to the host — one
/// copy, one wait (docs/architecture.md §8) — into their parts of `mine`.
void device_candidates(const std::vector<TensorView>& views, const std::vector<size_t>& which,
                       const std::vector<SelectionRequest>& requests, const ShardSpec& shard,
                       const std::vector<int64_t>& base, std::vector<uint8_t>& mine) {
  const int64_t slice = shard.vocab_rows.size(), n = static_cast<int64_t>(which.size());
  int64_t k = 0;
  bool stats = false;
  for (size_t i : which) {
    k = std::max(k, candidates_per_rank(requests[i], slice));
    stats = stats || requests[i].logprobs > 0;
  }
  if (k == 0 && !stats) return;
  const Device device = views[which[0]].device();
  // The rows side by side in one [n, slice] tensor (each sequence's logits are their own
  // tensor): device-to-device copies, enqueued without a wait.
  Tensor gathered;
  TensorView logits = views[which[0]].reshape({1, slice});
  if (n > 1) {
    gathered = Tensor::zeros({n, slice}, DType::F32, device);
    for (int64_t d = 0; d < n; ++d) {
      ops::copy(views[which[static_cast<size_t>(d)]].reshape({1, slice}), gathered.view().rows(d, d + 1));
    }
    logits = gathered.view();
  }
  // One device buffer: values [n, k] f32, columns [n, k] i32, stats [n, 2] f32.
  const int64_t words = 2 * n * k + (stats ? 2 * n : 0);
  const Tensor out = Tensor::zeros({words}, DType::F32, device);
  float* at = static_cast<float*>(out.view().data());
  const TensorView values = k > 0 ? TensorView(at, DType::F32, {n, k}, device) : TensorView();
  const TensorView columns = k > 0 ? TensorView(at + n * k, DType::I32, {n, k}, device) : TensorView();
  const TensorView row_stats = stats ? TensorView(at + 2 * n * k, DType::F32, {n, 2}, device) : TensorView();
  ops::top_candidates(logits, shard.vocab_real.size(), values, columns, row_stats);
  Tensor host = Tensor::zeros({words});
  ops::copy(out.view(), host.view());
  const float* hv = host.f32();
  const float* hs = hv + 2 * n * k;
  for (int64_t d = 0; d < n; ++d) {
    const size_t i = which[static_cast<size_t>(d)];
    const int64_t m = candidates_per_rank(requests[i], slice);
    Candidate* c = candidates(mine, static_cast<size_t>(base[i]));
    for (int64_t j = 0; j < m; ++j) {
      int32_t col;  // the i32 columns' bits
      std::memcpy(&col, hv + n * k + d * k + j, sizeof col);
      c[j] = {hv[d * k + j], col < 0 ? -1 : static_cast<int32_t>(shard.vocab_rows.begin + col)};
    }
    if (requests[i].logprobs > 0) *header(mine, static_cast<size_t>(base[i])) = {hs[2 * d], hs[2 * d + 1]};
  }
}

/// The candidates and statistics of one row on the host, into its part `at` of `mine`.
void host_candidates(const float* x, const SelectionRequest& req, const ShardSpec& shard, std::vector<uint8_t>& mine,
                     size_t at) {
  const int64_t slice = shard.vocab_rows.size(), real = shard.vocab_real.size();
  const int64_t m = candidates_per_rank(req, slice);
  Candidate* out = candidates(mine, at);
  const bool whole = whole_vocabulary(req);
  const int64_t k = whole ? 0 : m;  // whole vocabulary: the real slice in id order, unsorted
  std::vector<float> values(static_cast<size_t>(k));
  std::vector<int32_t> columns(static_cast<size_t>(k));
  float stats[2];
  ops::top_candidates(TensorView(const_cast<float*>(x), DType::F32, {1, slice}),  // only read
                      real, k > 0 ? TensorView(values.data(), DType::F32, {1, k}) : TensorView(),
                      k > 0 ? TensorView(columns.data(), DType::I32, {1, k}) : TensorView(),
                      req.logprobs > 0 ? TensorView(stats, DType::F32, {1, 2}) : TensorView());
  if (whole) {
    for (int64_t j = 0; j < real; ++j) out[j] = {x[j], static_cast<int32_t>(shard.vocab_rows.begin + j)};
  } else {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t col = columns[static_cast<size_t>(j)];
      out[j] = {values[static_cast<size_t>(j)], col < 0 ? -1 : static_cast<int32_t>(shard.vocab_rows.begin + col)};
    }
  }
  if (req.logprobs > 0) *header(mine, at) = {stats[0], stats[1]};
}
}  // namespace

std::vector<SelectedToken> select_tokens(const std::vector<TensorView>& row_views, const ShardSpec& shard,
                                         const std::vector<SelectionRequest>& requests,
                                         parallel::Communicator* tp) {
  OLMO2_CHECK(row_views.size() == requests.size(), row_views.size(), " rows for ", requests.size(), " requests");
  if (tp && tp->size() == 1) tp = nullptr;
  const int64_t slice = shard.vocab_rows.size();
  const size_t n = row_views.size();
  std::vector<int64_t> base(n + 1, 0);  // byte offset of each row's part
  for (size_t i = 0; i < n; ++i) {
    base[i + 1] = base[i] + static_cast<int64_t>(sizeof(RowHeader) + sizeof(Candidate) * candidates_per_rank(requests[i], slice));
  }
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<uint8_t> mine(static_cast<size_t>(base.back()));
  for (size_t i = 0; i < n; ++i) {
    *header(mine, static_cast<size_t>(base[i])) = {ninf, 0.0f};
    Candidate* out = candidates(mine, static_cast<size_t>(base[i]));
    for (int64_t j = 0; j < candidates_per_rank(requests[i], slice); ++j) out[j] = {ninf, -1};  // -1: padding
  }
  // Rows on a device that need only a few candidates get them there; the others (on the
  // host, sampling the whole vocabulary, or above the device's k) are chosen on the host,
  // device rows among them copied here whole first.
  std::vector<Tensor> host;
  std::vector<const float*> rows(n, nullptr);
  std::vector<size_t> on_device;
  for (size_t i = 0; i < n; ++i) {
    const TensorView& r = row_views[i];
    OLMO2_CHECK(r.numel() == slice && r.dtype() == DType::F32 && r.is_contiguous(), "token selection: logits ",
                r.shape_str(), " ", dtype_name(r.dtype()), " for a vocab slice of ", slice);
    if (r.device() == Device::CPU) {
      rows[i] = r.f32();
    } else if (!whole_vocabulary(requests[i]) && candidates_per_rank(requests[i], slice) <= ops::kMaxDeviceTopCandidates) {
      on_device.push_back(i);
    } else {
      host.push_back(Tensor::zeros(r.shape()));
      ops::copy(r, host.back().view());
      rows[i] = host.back().f32();
    }
  }
  if (!on_device.empty()) device_candidates(row_views, on_device, requests, shard, base, mine);
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < n; ++i) {
    if (rows[i]) host_candidates(rows[i], requests[i], shard, mine, static_cast<size_t>(base[i]));
  }
  const int ranks = tp ? tp->size() : 1;
  std::vector<uint8_t> all;
  if (tp) {
    all.resize(mine.size() * static_cast<size_t>(ranks));
    tp->all_gather(std::span<const uint8_t>(mine), std::span<uint8_t>(all));
  } else {
    all.swap(mine);
  }
  const size_t stride = static_cast<size_t>(base.back());
  std::vector<SelectedToken> result(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const SelectionRequest& req = requests[i];
    const int64_t m = candidates_per_rank(req, slice);
    std::vector<Candidate> c;  // whole vocabulary: in id order (ranks hold ascending slices)
    double gmax = -std::numeric_limits<double>::infinity();
    for (int r = 0; r < ranks; ++r) {
      const size_t at = static_cast<size_t>(r) * stride + static_cast<size_t>(base[i]);
      const RowHeader& h = *header(all, at);
      if (h.sum_exp > 0) gmax = std::max(gmax, static_cast<double>(h.max));
      const Candidate* in = candidates(all, at);
      for (int64_t j = 0; j < m; ++j) {
        if (in[j].id >= 0) c.push_back(in[j]);
      }
    }
    if (whole_vocabulary(req)) {
      result[i].id = sample_whole_vocabulary(c, req.params, req.draw);
      if (req.logprobs > 0) {  // the alternatives: the most likely few, sorted
        std::vector<Candidate> top(std::min(c.size(), static_cast<size_t>(req.logprobs) + 1));
        std::partial_sort_copy(c.begin(), c.end(), top.begin(), top.end(), more_likely);
        for (const Candidate& k : c) {
          if (k.id == result[i].id) top.push_back(k);  // the chosen one, for its own logprob
        }
        c.swap(top);
      }
    } else {
      if (ranks > 1) std::sort(c.begin(), c.end(), more_likely);  // one rank's list is sorted already
      if (req.params.temperature > 0 && req.params.top_k > 0 && static_cast<int64_t>(c.size()) > req.params.top_k) {
        std::vector<Candidate> cut(c.begin(), c.begin() + req.params.top_k);
        result[i].id = sample_sorted(cut, req.params, req.draw);
      } else {
        result[i].id = sample_sorted(c, req.params, req.draw);
      }
    }
    if (req.logprobs > 0) {
      double sum = 0;
      for (int r = 0; r < ranks; ++r) {
        const RowHeader& h = *header(all, static_cast<size_t>(r) * stride + static_cast<size_t>(base[i]));
        if (h.sum_exp > 0) sum += static_cast<double>(h.sum_exp) * std::exp(static_cast<double>(h.max) - gmax);
      }
      const double lse = gmax + std::log(sum);
      for (const Candidate& k : c) {
        if (k.id == result[i].id) result[i].logprob = static_cast<float>(k.logit - lse);
      }
      for (int64_t j = 0; j < std::min<int64_t>(req.logprobs, static_cast<int64_t>(c.size())); ++j) {
        result[i].top.push_back({static_cast<float>(c[static_cast<size_t>(j)].logit - lse), c[static_cast<size_t>(j)].id});
      }
    }
  }
  return result;
}

}  // namespace olmo2
