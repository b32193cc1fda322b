#include "runtime/generation/token_selection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "core/error.h"
#include "ops/tensor_ops.h"

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
}  // namespace

std::vector<SelectedToken> select_tokens(const std::vector<TensorView>& row_views, const ShardSpec& shard,
                                         const std::vector<SelectionRequest>& requests,
                                         parallel::Communicator* tp) {
  OLMO2_CHECK(row_views.size() == requests.size(), row_views.size(), " rows for ", requests.size(), " requests");
  if (tp && tp->size() == 1) tp = nullptr;
  const int64_t slice = shard.vocab_rows.size();
  // The choice is made on the host: rows on a device are copied here first.
  std::vector<Tensor> host;
  std::vector<const float*> rows;
  for (const TensorView& r : row_views) {
    OLMO2_CHECK(r.numel() == slice && r.dtype() == DType::F32 && r.is_contiguous(), "token selection: logits ",
                r.shape_str(), " ", dtype_name(r.dtype()), " for a vocab slice of ", slice);
    if (r.device() == Device::CPU) {
      rows.push_back(r.f32());
    } else {
      host.push_back(Tensor::zeros(r.shape()));
      ops::copy(r, host.back().view());
      rows.push_back(host.back().f32());
    }
  }
  const int64_t real = shard.vocab_real.size();  // real ids are the first `real` of the slice
  // What each rank sends per row: a header, then m candidates (logit f32, id i32) — the
  // same layout on every rank, all rows in one buffer, carried as bytes.
  struct RowHeader {
    float max;      ///< largest real logit of the slice (with logprobs)
    float sum_exp;  ///< Σ exp(x − max) over the slice's real ids (0: not computed)
  };
  static_assert(sizeof(RowHeader) == 8 && sizeof(Candidate) == 8, "packed 4-byte fields");
  std::vector<int64_t> base(rows.size() + 1, 0);  // byte offset of each row's part
  for (size_t i = 0; i < rows.size(); ++i) {
    base[i + 1] = base[i] + static_cast<int64_t>(sizeof(RowHeader) + sizeof(Candidate) * candidates_per_rank(requests[i], slice));
  }
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<uint8_t> mine(static_cast<size_t>(base.back()));
  auto header = [](std::vector<uint8_t>& buf, size_t at) { return reinterpret_cast<RowHeader*>(buf.data() + at); };
  auto candidates = [](std::vector<uint8_t>& buf, size_t at) {
    return reinterpret_cast<Candidate*>(buf.data() + at + sizeof(RowHeader));
  };
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* x = rows[i];
    RowHeader& h = *header(mine, static_cast<size_t>(base[i]));
    Candidate* out = candidates(mine, static_cast<size_t>(base[i]));
    const int64_t m = candidates_per_rank(requests[i], slice);
    h = {ninf, 0.0f};
    for (int64_t j = 0; j < m; ++j) out[j] = {ninf, -1};  // -1: padding (a rank with fewer real ids)
    if (m == 1 && requests[i].logprobs == 0) {  // greedy: one scan, no candidate list
      if (real > 0) {
        const int32_t j = argmax(x, real);
        out[0] = {x[j], static_cast<int32_t>(shard.vocab_rows.begin + j)};
      }
      continue;
    }
    std::vector<Candidate> c(static_cast<size_t>(real));
    for (int64_t j = 0; j < real; ++j) c[static_cast<size_t>(j)] = {x[j], static_cast<int32_t>(shard.vocab_rows.begin + j)};
    const int64_t take = std::min(m, real);
    if (whole_vocabulary(requests[i])) {
      // The whole slice in id order: sample_whole_vocabulary sorts only what it needs.
    } else if (take * 4 >= real) {
      std::sort(c.begin(), c.end(), more_likely);  // introsort: much faster than a full heap sort
    } else {
      std::partial_sort(c.begin(), c.begin() + take, c.end(), more_likely);
    }
    if (requests[i].logprobs > 0 && real > 0) {
      float mx = c[0].logit;
      for (int64_t j = 0; j < real; ++j) mx = std::max(mx, x[j]);
      double s = 0;
      for (int64_t j = 0; j < real; ++j) s += std::exp(static_cast<double>(x[j]) - mx);
      h = {mx, static_cast<float>(s)};
    }
    for (int64_t j = 0; j < take; ++j) out[j] = c[static_cast<size_t>(j)];
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
