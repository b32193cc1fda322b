// The forward tap that applies interventions and records this rank's share of the reads
// (runtime/trace/activation_recorder.h; docs/architecture.md §13).
#include "runtime/trace/activation_recorder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/tensor_ops.h"
#include "runtime/trace/piece_format.h"

namespace olmo2::trace {
namespace {

/// A tapped tensor's values on the host: the view itself on the CPU, else a copy that
/// write_back() returns to the device.
class HostRows {
 public:
  explicit HostRows(const TensorView& v) : view_(v) {
    if (v.device() == Device::CPU && v.is_contiguous()) {
      data_ = v.f32();
    } else {
      copy_ = Tensor::zeros(v.shape(), DType::F32, Device::CPU);
      ops::copy(v, copy_.view());
      data_ = copy_.f32();
    }
  }
  float* data() const { return data_; }
  void write_back() const {
    if (!copy_.empty()) ops::copy(copy_.view(), view_);
  }

 private:
  TensorView view_;
  Tensor copy_;
  float* data_ = nullptr;
};

bool residual_site(TapSite s) {
  return s == TapSite::TokenEmbeddings || s == TapSite::LayerInput || s == TapSite::AttentionOutput ||
         s == TapSite::LayerMid || s == TapSite::MlpOutput || s == TapSite::LayerOutput ||
         s == TapSite::FinalNormOutput;
}

bool covers_layer(const std::vector<int64_t>& layers, int64_t layer) {
  return layer < 0 ? layers.empty() : std::binary_search(layers.begin(), layers.end(), layer);
}

/// The rows t of n new ones (at positions p0 + t) that `read` records for `ts`: one run
/// (prompt, generated or all positions, from record_from on) as {first row, count}.
std::pair<int64_t, int64_t> covered_rows(const ActivationRead& read, const TracedSequence& ts, int64_t p0, int64_t n) {
  int64_t first = -1, count = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = p0 + t;
    if (p < ts.record_from || !read.positions.contains(p, ts.spec->prompt_len)) continue;
    if (first < 0) first = t;
    count = t - first + 1;
  }
  return {first, count};
}

}  // namespace

ActivationRecorder::ActivationRecorder(const ModelConfig& config, const ShardSpec& shard, int tp_rank,
                                       std::vector<TracedSequence> sequences)
    : config_(config), shard_(shard), tp_rank_(tp_rank), sequences_(std::move(sequences)) {}

bool ActivationRecorder::active() const {
  return std::any_of(sequences_.begin(), sequences_.end(), [](const TracedSequence& s) { return s.spec; });
}

bool ActivationRecorder::wants(TapSite site, int64_t layer) const {
  for (const TracedSequence& s : sequences_) {
    if (s.spec && s.spec->touches(site, layer)) return true;
  }
  return false;
}

bool ActivationRecorder::wants_attention(int64_t layer, size_t seq) const {
  if (seq >= sequences_.size() || !sequences_[seq].spec) return false;
  const std::vector<ActivationRead>& reads = sequences_[seq].spec->reads;
  return std::any_of(reads.begin(), reads.end(), [&](const ActivationRead& r) {
    return r.site == TapSite::AttentionProbabilities && covers_layer(r.layers, layer);
  });
}

ColumnShare ActivationRecorder::share(TapSite site) const {
  const int64_t hd = config_.head_dim;
  ColumnShare c;
  switch (site) {
    case TapSite::AttentionQueries:
    case TapSite::AttentionHeadOutputs:
      c = {shard_.q_heads.begin * hd, 0, shard_.q_heads.size() * hd, shard_.q_heads.begin, hd, true};
      break;
    case TapSite::AttentionKeys:
    case TapSite::AttentionValues:
      c = {shard_.kv_heads.begin * hd, 0, shard_.kv_heads.size() * hd, shard_.kv_heads.begin, hd,
           shard_.kv_replica == 0};
      break;
    case TapSite::MlpNeurons:
      c = {shard_.mlp_rows.begin, 0, shard_.mlp_rows.size(), 0, 0, true};
      break;
    case TapSite::LmHeadOutput:
      c = {shard_.vocab_real.begin, shard_.vocab_real.begin - shard_.vocab_rows.begin, shard_.vocab_real.size(), 0, 0,
           true};
      break;
    default:  // the replicated residual stream: TP rank 0 reports it
      c = {0, 0, config_.hidden_size, 0, 0, tp_rank_ == 0};
      break;
  }
  return c;
}

void ActivationRecorder::at(TapSite site, int64_t layer, const TapRows& where, const TensorView& rows) {
  OLMO2_CHECK(where.sequences() <= sequences_.size(), "tap rows of ", where.sequences(), " sequences, the batch has ",
              sequences_.size());
  const int64_t width = rows.size(1);
  HostRows host(rows);
  bool changed = false;
  for (size_t i = 0; i < where.sequences(); ++i) {
    const TracedSequence& ts = sequences_[i];
    if (!ts.spec) continue;
    const TraceSpec& spec = *ts.spec;
    const int64_t r0 = where.offset[i], n = where.offset[i + 1] - r0, p0 = where.first_position[i];
    // Reads: this rank's columns of the covered rows, reduced. attention_head_outputs is
    // the attention function's output, read before an ablation (transformers ablates at
    // o_proj's input, attention_premix); every other read sees the interventions.
    const ColumnShare share_of_site = share(site);
    auto read_rows = [&](bool before_interventions) {
      if (!share_of_site.reports) return;
      for (size_t r = 0; r < spec.reads.size(); ++r) {
        const ActivationRead& read = spec.reads[r];
        if (read.site != site || !covers_layer(read.layers, layer)) continue;
        if ((read.name == "attention_head_outputs") != before_interventions) continue;
        const auto [first, count] = covered_rows(read, ts, p0, n);
        if (count == 0) continue;
        PieceHeader hdr{ts.tag, static_cast<int32_t>(r), static_cast<int32_t>(layer),
                        static_cast<int32_t>(read.reduce), static_cast<int32_t>(p0 + first),
                        static_cast<int32_t>(count), 0, 0, 0};
        append_rows(hdr, share_of_site, host.data() + (r0 + first) * width, width, count);
      }
    };
    read_rows(true);
    // Interventions: what the later reads and the rest of the forward see.
    for (const Intervention& iv : spec.interventions) {
      if (iv.site != site || !covers_layer(iv.layers, layer)) continue;
      if (iv.kind == Intervention::Kind::Add) {
        OLMO2_CHECK(residual_site(site) && width == config_.hidden_size, "a steering vector on ", rows.shape_str());
        for (int64_t t = 0; t < n; ++t) {
          if (!iv.positions.contains(p0 + t, spec.prompt_len)) continue;
          float* row = host.data() + (r0 + t) * width;
          for (int64_t j = 0; j < width; ++j) row[j] += iv.coefficient * iv.vector[static_cast<size_t>(j)];
          changed = true;
        }
      } else if (iv.head >= shard_.q_heads.begin && iv.head < shard_.q_heads.end) {  // AblateHead, on its rank
        const int64_t hd = config_.head_dim, c0 = (iv.head - shard_.q_heads.begin) * hd;
        for (int64_t t = 0; t < n; ++t) {
          if (!iv.positions.contains(p0 + t, spec.prompt_len)) continue;
          std::fill_n(host.data() + (r0 + t) * width + c0, hd, 0.0f);
          changed = true;
        }
      }
    }
    read_rows(false);
  }
  if (changed) host.write_back();
}

void ActivationRecorder::append_rows(PieceHeader hdr, const ColumnShare& c, const float* rows, int64_t stride,
                                     int64_t count) {
  const Reduce reduce = static_cast<Reduce>(hdr.reduce);
  const int64_t groups = c.group_width > 0 ? c.width / c.group_width : 1;
  if (reduce == Reduce::None) {
    hdr.column = static_cast<int32_t>(c.column), hdr.width = static_cast<int32_t>(c.width);
    append_header(pieces_, hdr);
    for (int64_t t = 0; t < count; ++t) {
      const float* row = rows + t * stride + c.local;
      pieces_.insert(pieces_.end(), row, row + c.width);
    }
  } else if (reduce == Reduce::Norm) {  // per row (per head) partial sums of squares
    hdr.column = static_cast<int32_t>(c.group_width > 0 ? c.group : 0), hdr.width = static_cast<int32_t>(groups);
    append_header(pieces_, hdr);
    const int64_t gw = c.group_width > 0 ? c.group_width : c.width;
    for (int64_t t = 0; t < count; ++t) {
      const float* row = rows + t * stride + c.local;
      for (int64_t g = 0; g < groups; ++g) {
        double s = 0;
        for (int64_t j = 0; j < gw; ++j) s += static_cast<double>(row[g * gw + j]) * row[g * gw + j];
        pieces_.push_back(static_cast<float>(s));
      }
    }
  } else {  // Mean: column sums over the rows, in double, sent as doubles
    hdr.column = static_cast<int32_t>(c.column), hdr.width = static_cast<int32_t>(c.width);
    append_header(pieces_, hdr);
    std::vector<double> sum(static_cast<size_t>(c.width), 0.0);
    for (int64_t t = 0; t < count; ++t) {
      const float* row = rows + t * stride + c.local;
      for (int64_t j = 0; j < c.width; ++j) sum[static_cast<size_t>(j)] += row[j];
    }
    for (double s : sum) append_double(pieces_, s);
  }
}

void ActivationRecorder::attention(int64_t layer, const TapRows& where, size_t seq, const TensorView& q,
                                   const TensorView& keys, int64_t keys_first, int64_t window) {
  if (!wants_attention(layer, seq)) return;
  const TracedSequence& ts = sequences_[seq];
  const TraceSpec& spec = *ts.spec;
  const int64_t hd = config_.head_dim, nh = shard_.q_heads.size(), nkv = shard_.kv_heads.size();
  const int64_t n = q.size(0), p0 = where.first_position[seq];
  const HostRows qh(q), kh(keys);
  const int64_t group = nh / std::max<int64_t>(nkv, 1);  // query heads per local kv head
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (size_t r = 0; r < spec.reads.size(); ++r) {
    const ActivationRead& read = spec.reads[r];
    if (read.site != TapSite::AttentionProbabilities || !covers_layer(read.layers, layer)) continue;
    const auto [first, count] = covered_rows(read, ts, p0, n);
    if (count == 0) continue;
    // probs [count, nh, K]: key k is position k; row t sees keys max(0, p−W+1) … p.
    const int64_t kext = p0 + first + count;
    std::vector<float> probs(static_cast<size_t>(count * nh * kext), 0.0f);
    std::vector<float> score;
    for (int64_t t = 0; t < count; ++t) {
      const int64_t p = p0 + first + t, lo = std::max(keys_first, window > 0 ? p - window + 1 : int64_t{0});
      for (int64_t h = 0; h < nh; ++h) {
        const float* qr = qh.data() + (first + t) * q.size(1) + h * hd;
        const int64_t kvh = h / group;
        score.assign(static_cast<size_t>(p - lo + 1), 0.0f);
        float mx = -INFINITY;
        for (int64_t k = lo; k <= p; ++k) {
          const float* kr = kh.data() + (k - keys_first) * keys.size(1) + kvh * hd;
          float dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += qr[d] * kr[d];
          score[static_cast<size_t>(k - lo)] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        double total = 0;
        for (float& s : score) total += (s = std::exp(s - mx));
        float* out = probs.data() + (t * nh + h) * kext;
        for (int64_t k = lo; k <= p; ++k) out[k] = static_cast<float>(score[static_cast<size_t>(k - lo)] / total);
      }
    }
    PieceHeader hdr{ts.tag, static_cast<int32_t>(r), static_cast<int32_t>(layer), static_cast<int32_t>(read.reduce),
                    static_cast<int32_t>(p0 + first), static_cast<int32_t>(count), 0, 0, static_cast<int32_t>(kext)};
    // Per row the [nh, K] block; as columns: this rank's heads' K-wide slots.
    const ColumnShare c{shard_.q_heads.begin * kext, 0, nh * kext, shard_.q_heads.begin, kext, true};
    append_rows(hdr, c, probs.data(), nh * kext, count);
  }
}

std::vector<float> gather_pieces(parallel::Communicator& world, const std::vector<float>& local) {
  constexpr int kTag = 7301;  // pieces of named activations, rank r → 0
  std::vector<int64_t> sizes(static_cast<size_t>(world.size()), 0);
  const int64_t mine = static_cast<int64_t>(local.size());
  world.all_gather(std::span<const int64_t>(&mine, 1), std::span<int64_t>(sizes));
  if (world.rank() != 0) {
    if (mine > 0) world.send(host_view(local), 0, kTag);
    return {};
  }
  std::vector<float> all(local);
  for (int r = 1; r < world.size(); ++r) {
    const int64_t n = sizes[static_cast<size_t>(r)];
    if (n == 0) continue;
    std::vector<float> in(static_cast<size_t>(n));
    world.recv(host_view(in), r, kTag);
    all.insert(all.end(), in.begin(), in.end());
  }
  return all;
}

}  // namespace olmo2::trace
