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
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Sampling without top_k: every rank sends its whole slice, unsorted.
bool whole_vocabulary(const SelectionRequest& r) {
  return r.target < 0 && r.params.temperature > 0 && r.params.top_k == 0;
}

/// Whether the row's raw statistics (max, Σexp) are needed: for log-probabilities.
bool wants_stats(const SelectionRequest& r) { return r.logprobs > 0 || r.target >= 0; }

/// What each rank sends per row — the same layout on every rank, all rows in one buffer,
/// carried as bytes: a header, then (logit f32, id i32) pairs in up to four parts:
/// `choice` candidates to choose from (of the adjusted logits for an adjusted row; else
/// of the raw ones, which then also give the alternatives), with `raw` the raw logits of
/// those same candidates, `alternatives` raw candidates for the reported
/// log-probabilities (adjusted and target rows), and with `target` the target's raw logit
/// (id −1 on the ranks that do not hold it).
struct RowLayout {
  int64_t choice = 0;
  bool raw = false;
  int64_t alternatives = 0;
  bool target = false;
  int64_t pairs() const { return choice * (raw ? 2 : 1) + alternatives + (target ? 1 : 0); }
};

RowLayout layout_of(const SelectionRequest& r, int64_t slice) {
  RowLayout l;
  const int64_t lp = std::min<int64_t>(slice, r.logprobs);
  if (r.target >= 0) {
    l.alternatives = lp;
    l.target = true;
    return l;
  }
  int64_t m = 1;  // greedy
  if (r.params.temperature > 0) m = r.params.top_k > 0 ? std::min(r.params.top_k, slice) : slice;
  if (!r.adjusted()) {
    l.choice = std::max(m, lp);
    return l;
  }
  l.choice = m;
  l.raw = r.logprobs > 0;
  l.alternatives = lp;
  return l;
}

struct RowHeader {
  float max;      ///< largest real raw logit of the slice (with logprobs)
  float sum_exp;  ///< Σ exp(x − max) over the slice's real ids (0: not computed)
};
static_assert(sizeof(RowHeader) == 8 && sizeof(Candidate) == 8, "packed 4-byte fields");

size_t row_bytes(const RowLayout& l) { return sizeof(RowHeader) + sizeof(Candidate) * static_cast<size_t>(l.pairs()); }

/// The parts of the row at byte `at` of `buf`.
struct RowParts {
  RowHeader* header;
  Candidate* choice;
  Candidate* raw;
  Candidate* alternatives;
  Candidate* target;
};
RowParts parts(std::vector<uint8_t>& buf, size_t at, const RowLayout& l) {
  RowParts p;
  p.header = reinterpret_cast<RowHeader*>(buf.data() + at);
  p.choice = reinterpret_cast<Candidate*>(buf.data() + at + sizeof(RowHeader));
  p.raw = p.choice + l.choice;
  p.alternatives = p.raw + (l.raw ? l.choice : 0);
  p.target = p.alternatives + l.alternatives;
  return p;
}

/// ops::top_candidates of one host row x [slice] over its `real` columns: the k best
/// into `out` (ids = first + column), and the statistics into `stats` unless null.
void host_top(const float* x, int64_t slice, int64_t real, int64_t first, int64_t k, Candidate* out,
              RowHeader* stats) {
  if (k == 0 && !stats) return;
  std::vector<float> values(static_cast<size_t>(k));
  std::vector<int32_t> columns(static_cast<size_t>(k));
  float st[2];
  ops::top_candidates(TensorView(const_cast<float*>(x), DType::F32, {1, slice}),  // only read
                      real, k > 0 ? TensorView(values.data(), DType::F32, {1, k}) : TensorView(),
                      k > 0 ? TensorView(columns.data(), DType::I32, {1, k}) : TensorView(),
                      stats ? TensorView(st, DType::F32, {1, 2}) : TensorView());
  for (int64_t j = 0; j < k; ++j) {
    const int32_t col = columns[static_cast<size_t>(j)];
    out[j] = {values[static_cast<size_t>(j)], col < 0 ? -1 : static_cast<int32_t>(first + col)};
  }
  if (stats) *stats = {st[0], st[1]};
}

bool holds(const ShardSpec& shard, int32_t id) { return id >= shard.vocab_real.begin && id < shard.vocab_real.end; }

/// The rows `which` (on the device, none adjusted or sampling the whole vocabulary, each
/// wanting at most kMaxDeviceTopCandidates): their candidates and statistics made on the
/// device by one ops::top_candidates over all of them, target rows' target logits
/// gathered there by one ops::gather_rows, and only these copied to the host — one copy,
/// one wait (docs/architecture.md §8) — into their parts of `mine`.
void device_candidates(const std::vector<TensorView>& views, const std::vector<size_t>& which,
                       const std::vector<SelectionRequest>& requests, const ShardSpec& shard,
                       const std::vector<size_t>& base, std::vector<uint8_t>& mine) {
  const int64_t slice = shard.vocab_rows.size(), n = static_cast<int64_t>(which.size());
  const int64_t first = shard.vocab_rows.begin;
  int64_t k = 0;
  bool stats = false;
  std::vector<int32_t> flat;        // targets held here: their index in the [n·slice] logits
  std::vector<int64_t> target_row;  // and their row among `which`
  for (int64_t d = 0; d < n; ++d) {
    const SelectionRequest& r = requests[which[static_cast<size_t>(d)]];
    const RowLayout l = layout_of(r, slice);
    k = std::max(k, r.target >= 0 ? l.alternatives : l.choice);
    stats = stats || wants_stats(r);
    if (r.target >= 0 && holds(shard, r.target)) {
      flat.push_back(static_cast<int32_t>(d * slice + (r.target - first)));
      target_row.push_back(d);
    }
  }
  const int64_t t = static_cast<int64_t>(flat.size());
  if (k == 0 && !stats && t == 0) return;
  OLMO2_CHECK(n * slice <= std::numeric_limits<int32_t>::max(), n, " rows of ", slice, " logits: past i32 indices");
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
  // One device buffer: values [n, k] f32, columns [n, k] i32, stats [n, 2] f32, targets [t] f32.
  const int64_t stat_words = stats ? 2 * n : 0;
  const int64_t words = 2 * n * k + stat_words + t;
  const Tensor out = Tensor::zeros({words}, DType::F32, device);
  float* at = static_cast<float*>(out.view().data());
  if (k > 0 || stats) {
    const TensorView values = k > 0 ? TensorView(at, DType::F32, {n, k}, device) : TensorView();
    const TensorView columns = k > 0 ? TensorView(at + n * k, DType::I32, {n, k}, device) : TensorView();
    const TensorView row_stats = stats ? TensorView(at + 2 * n * k, DType::F32, {n, 2}, device) : TensorView();
    ops::top_candidates(logits, shard.vocab_real.size(), values, columns, row_stats);
  }
  Tensor index;
  if (t > 0) {
    index = Tensor::zeros({t}, DType::I32, device);
    ops::copy(host_view(flat), index.view());
    ops::gather_rows(logits.reshape({n * slice, 1}), index.view(),
                     TensorView(at + 2 * n * k + stat_words, DType::F32, {t, 1}, device));
  }
  Tensor host = Tensor::zeros({words});
  ops::copy(out.view(), host.view());
  const float* hv = host.f32();
  const float* hs = hv + 2 * n * k;
  for (int64_t d = 0; d < n; ++d) {
    const size_t i = which[static_cast<size_t>(d)];
    const SelectionRequest& r = requests[i];
    const RowLayout l = layout_of(r, slice);
    const RowParts p = parts(mine, base[i], l);
    Candidate* dst = r.target >= 0 ? p.alternatives : p.choice;
    const int64_t m = r.target >= 0 ? l.alternatives : l.choice;
    for (int64_t j = 0; j < m; ++j) {
      int32_t col;  // the i32 columns' bits
      std::memcpy(&col, hv + n * k + d * k + j, sizeof col);
      dst[j] = {hv[d * k + j], col < 0 ? -1 : static_cast<int32_t>(first + col)};
    }
    if (wants_stats(r)) *p.header = {hs[2 * d], hs[2 * d + 1]};
  }
  for (int64_t q = 0; q < t; ++q) {
    const size_t i = which[static_cast<size_t>(target_row[static_cast<size_t>(q)])];
    *parts(mine, base[i], layout_of(requests[i], slice)).target = {hs[stat_words + q], requests[i].target};
  }
}

/// The candidates and statistics of one row on the host, into its part `at` of `mine`.
void host_candidates(const float* x, const SelectionRequest& req, const ShardSpec& shard, std::vector<uint8_t>& mine,
                     size_t at) {
  const int64_t slice = shard.vocab_rows.size(), real = shard.vocab_real.size(), first = shard.vocab_rows.begin;
  const RowLayout l = layout_of(req, slice);
  const RowParts p = parts(mine, at, l);
  RowHeader* stats = wants_stats(req) ? p.header : nullptr;
  if (req.target >= 0) {
    host_top(x, slice, real, first, l.alternatives, p.alternatives, stats);
    if (holds(shard, req.target)) *p.target = {x[req.target - first], req.target};
    return;
  }
  std::vector<float> adjusted;
  const float* from = x;  // the logits the token is chosen from
  if (req.adjusted()) {
    adjusted.assign(x, x + slice);
    if (req.allowed) {  // the constraint first: the ban and the adjustments act on what it allows
      apply_allowed_mask(std::span<float>(adjusted.data(), static_cast<size_t>(std::max<int64_t>(real, 0))), first,
                         *req.allowed);
    }
    apply_logits_adjustments(std::span<float>(adjusted.data(), static_cast<size_t>(std::max<int64_t>(real, 0))), first,
                             req.adjust, req.banned, req.prompt_ids, req.output_counts);
    from = adjusted.data();
    host_top(x, slice, real, first, l.alternatives, p.alternatives, stats);  // raw alternatives and statistics
    stats = nullptr;
  }
  if (whole_vocabulary(req)) {  // the real slice in id order, unsorted
    for (int64_t j = 0; j < real; ++j) p.choice[j] = {from[j], static_cast<int32_t>(first + j)};
    host_top(x, slice, real, first, 0, nullptr, stats);
  } else {
    host_top(from, slice, real, first, l.choice, p.choice, stats);
  }
  if (l.raw) {
    for (int64_t j = 0; j < l.choice; ++j) {
      const int32_t id = p.choice[j].id;
      p.raw[j] = {id >= 0 ? x[id - first] : kNegInf, id};
    }
  }
}

/// Candidates of the part `part` of row i from every rank, those with an id (ranks in
/// order: for the whole vocabulary, ids ascending).
std::vector<Candidate> merged(std::vector<uint8_t>& all, size_t stride, int ranks, size_t at, const RowLayout& l,
                              Candidate* RowParts::*part, int64_t count) {
  std::vector<Candidate> c;
  for (int r = 0; r < ranks; ++r) {
    const Candidate* in = parts(all, static_cast<size_t>(r) * stride + at, l).*part;
    for (int64_t j = 0; j < count; ++j) {
      if (in[j].id >= 0) c.push_back(in[j]);
    }
  }
  return c;
}
}  // namespace

std::vector<SelectedToken> select_tokens(const std::vector<TensorView>& row_views, const ShardSpec& shard,
                                         const std::vector<SelectionRequest>& requests,
                                         parallel::Communicator* tp) {
  OLMO2_CHECK(row_views.size() == requests.size(), row_views.size(), " rows for ", requests.size(), " requests");
  if (tp && tp->size() == 1) tp = nullptr;
  const int64_t slice = shard.vocab_rows.size();
  const size_t n = row_views.size();
  std::vector<RowLayout> layout(n);
  std::vector<size_t> base(n + 1, 0);  // byte offset of each row's part
  for (size_t i = 0; i < n; ++i) {
    layout[i] = layout_of(requests[i], slice);
    base[i + 1] = base[i] + row_bytes(layout[i]);
  }
  std::vector<uint8_t> mine(base.back());
  for (size_t i = 0; i < n; ++i) {
    const RowParts p = parts(mine, base[i], layout[i]);
    *p.header = {kNegInf, 0.0f};
    for (int64_t j = 0; j < layout[i].pairs(); ++j) p.choice[j] = {kNegInf, -1};  // -1: padding
  }
  // Rows on a device that need only a few candidates get them there; the others (on the
  // host, adjusted, sampling the whole vocabulary, or above the device's k) are chosen
  // on the host, device rows among them copied here whole first.
  std::vector<Tensor> host;
  std::vector<const float*> rows(n, nullptr);
  std::vector<size_t> on_device;
  for (size_t i = 0; i < n; ++i) {
    const TensorView& r = row_views[i];
    OLMO2_CHECK(r.numel() == slice && r.dtype() == DType::F32 && r.is_contiguous(), "token selection: logits ",
                r.shape_str(), " ", dtype_name(r.dtype()), " for a vocab slice of ", slice);
    const RowLayout& l = layout[i];
    if (r.device() == Device::CPU) {
      rows[i] = r.f32();
    } else if (!whole_vocabulary(requests[i]) && !requests[i].adjusted() &&
               std::max(l.choice, l.alternatives) <= ops::kMaxDeviceTopCandidates) {
      on_device.push_back(i);
    } else {
      host.push_back(Tensor::zeros(r.shape()));
      ops::copy(r, host.back().view());
      rows[i] = host.back().f32();
    }
  }
  if (!on_device.empty()) device_candidates(row_views, on_device, requests, shard, base, mine);
  // The adjustment lists are checked here, outside the parallel loop (an exception must
  // not leave an OpenMP region): over an empty slice the call only checks them.
  for (const SelectionRequest& r : requests) {
    if (r.adjusted()) apply_logits_adjustments({}, 0, r.adjust, r.banned, r.prompt_ids, r.output_counts);
  }
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < n; ++i) {
    if (rows[i]) host_candidates(rows[i], requests[i], shard, mine, base[i]);
  }
  const int ranks = tp ? tp->size() : 1;
  std::vector<uint8_t> all;
  if (tp) {
    all.resize(mine.size() * static_cast<size_t>(ranks));
    tp->all_gather(std::span<const uint8_t>(mine), std::span<uint8_t>(all));
  } else {
    all.swap(mine);
  }
  const size_t stride = base.back();
  std::vector<SelectedToken> result(n);
  for (size_t i = 0; i < n; ++i) {
    const SelectionRequest& req = requests[i];
    const RowLayout& l = layout[i];
    double gmax = -std::numeric_limits<double>::infinity();  // log-sum-exp of the raw logits over the ranks
    for (int r = 0; r < ranks; ++r) {
      const RowHeader& h = *parts(all, static_cast<size_t>(r) * stride + base[i], l).header;
      if (h.sum_exp > 0) gmax = std::max(gmax, static_cast<double>(h.max));
    }
    double sum = 0;
    for (int r = 0; r < ranks; ++r) {
      const RowHeader& h = *parts(all, static_cast<size_t>(r) * stride + base[i], l).header;
      if (h.sum_exp > 0) sum += static_cast<double>(h.sum_exp) * std::exp(static_cast<double>(h.max) - gmax);
    }
    const double lse = gmax + std::log(sum);
    auto report = [&](std::vector<Candidate> alternatives) {  // the `logprobs` most likely, as log-probabilities
      if (ranks > 1) std::sort(alternatives.begin(), alternatives.end(), more_likely);  // one rank's are sorted
      for (int64_t j = 0; j < std::min<int64_t>(req.logprobs, static_cast<int64_t>(alternatives.size())); ++j) {
        const Candidate& a = alternatives[static_cast<size_t>(j)];
        result[i].top.push_back({static_cast<float>(a.logit - lse), a.id});
      }
    };
    if (req.target >= 0) {
      result[i].id = req.target;
      for (const Candidate& k : merged(all, stride, ranks, base[i], l, &RowParts::target, 1)) {
        result[i].logprob = static_cast<float>(k.logit - lse);
      }
      report(merged(all, stride, ranks, base[i], l, &RowParts::alternatives, l.alternatives));
      continue;
    }
    std::vector<Candidate> c = merged(all, stride, ranks, base[i], l, &RowParts::choice, l.choice);
    if (whole_vocabulary(req)) {
      result[i].id = sample_whole_vocabulary(c, req.params, req.draw);
      if (req.logprobs > 0 && !l.raw) {  // the alternatives: the most likely few, sorted
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
    if (req.logprobs == 0) continue;
    if (l.raw) {  // adjusted: the chosen token's raw logit and the raw distribution's best
      for (const Candidate& k : merged(all, stride, ranks, base[i], l, &RowParts::raw, l.choice)) {
        if (k.id == result[i].id) result[i].logprob = static_cast<float>(k.logit - lse);
      }
      report(merged(all, stride, ranks, base[i], l, &RowParts::alternatives, l.alternatives));
      continue;
    }
    for (const Candidate& k : c) {
      if (k.id == result[i].id) result[i].logprob = static_cast<float>(k.logit - lse);
    }
    for (int64_t j = 0; j < std::min<int64_t>(req.logprobs, static_cast<int64_t>(c.size())); ++j) {
      const Candidate& a = c[static_cast<size_t>(j)];
      result[i].top.push_back({static_cast<float>(a.logit - lse), a.id});
    }
  }
  return result;
}

}  // namespace olmo2
