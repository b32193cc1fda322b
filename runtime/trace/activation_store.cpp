// Rank 0's assembly of one request's reads from the pieces of every step and rank
// (runtime/trace/activation_recorder.h; docs/architecture.md §13).
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "runtime/trace/activation_recorder.h"

namespace olmo2::trace {
namespace {

/// How a site's flattened feature axis maps to nnterp's layout.
enum class Layout { Rows, HeadRows, HeadsFirst, Probabilities };

Layout layout_of(TapSite s) {
  switch (s) {
    case TapSite::AttentionQueries:
    case TapSite::AttentionKeys:
    case TapSite::AttentionValues:
      return Layout::HeadsFirst;
    case TapSite::AttentionHeadOutputs:
      return Layout::HeadRows;
    case TapSite::AttentionProbabilities:
      return Layout::Probabilities;
    default:
      return Layout::Rows;
  }
}

/// One read at one layer.
struct Accumulator {
  std::set<int64_t> positions;
  std::map<int64_t, std::vector<float>> rows;    // None: per position, the flattened features
  std::map<int64_t, std::vector<double>> sumsq;  // Norm: per position, per group
  std::vector<std::vector<double>> sum;          // Mean: per head (one "head" without heads)
};

}  // namespace

struct ActivationStore::Impl {
  std::shared_ptr<const TraceSpec> spec;
  ModelConfig config;
  std::map<std::pair<size_t, int64_t>, Accumulator> acc;  // (read, layer) →

  /// Heads of a head-level site (its groups), 1 otherwise.
  int64_t heads(TapSite s) const {
    if (s == TapSite::AttentionKeys || s == TapSite::AttentionValues) return config.num_key_value_heads;
    if (layout_of(s) == Layout::Rows) return 1;
    return config.num_attention_heads;
  }
  /// Width of the flattened feature axis (probabilities: per head, the position's keys).
  int64_t features(TapSite s) const {
    switch (s) {
      case TapSite::AttentionQueries:
      case TapSite::AttentionHeadOutputs:
        return config.num_attention_heads * config.head_dim;
      case TapSite::AttentionKeys:
      case TapSite::AttentionValues:
        return config.num_key_value_heads * config.head_dim;
      case TapSite::MlpNeurons:
        return config.intermediate_size;
      case TapSite::LmHeadOutput:
        return config.vocab_size;
      default:
        return config.hidden_size;
    }
  }
};

ActivationStore::ActivationStore(std::shared_ptr<const TraceSpec> spec, const ModelConfig& config)
    : impl_(std::make_shared<Impl>(Impl{std::move(spec), config, {}})) {}

void ActivationStore::add(std::span<const float> pieces, int32_t tag) {
  size_t pos = 0;
  while (pos < pieces.size()) {
    OLMO2_CHECK(pos + PieceHeader::kWords <= pieces.size(), "a truncated activation piece header");
    const PieceHeader h = read_header(pieces.subspan(pos));
    pos += PieceHeader::kWords;
    OLMO2_CHECK(h.rows > 0 && h.width >= 0 && pos + h.values() <= pieces.size(), "a malformed activation piece");
    const float* v = pieces.data() + pos;
    pos += static_cast<size_t>(h.values());
    if (h.tag != tag) continue;
    const TraceSpec& spec = *impl_->spec;
    OLMO2_CHECK(h.read >= 0 && static_cast<size_t>(h.read) < spec.reads.size(), "a piece of read ", h.read);
    const ActivationRead& read = spec.reads[static_cast<size_t>(h.read)];
    Accumulator& a = impl_->acc[{static_cast<size_t>(h.read), h.layer}];
    const bool probs = read.site == TapSite::AttentionProbabilities;
    const int64_t heads = impl_->heads(read.site);
    for (int64_t t = 0; t < h.rows; ++t) a.positions.insert(h.position + t);
    switch (static_cast<Reduce>(h.reduce)) {
      case Reduce::None:
        for (int64_t t = 0; t < h.rows; ++t) {
          const int64_t p = h.position + t;
          std::vector<float>& row = a.rows[p];
          if (!probs) {
            row.resize(static_cast<size_t>(impl_->features(read.site)), 0.0f);
            std::memcpy(row.data() + h.column, v + t * h.width, sizeof(float) * static_cast<size_t>(h.width));
            continue;
          }
          row.resize(static_cast<size_t>(heads * (p + 1)), 0.0f);  // per head, keys 0 … p
          const int64_t first_head = h.column / h.keys, nh = h.width / h.keys;
          for (int64_t j = 0; j < nh; ++j) {
            std::memcpy(row.data() + (first_head + j) * (p + 1), v + t * h.width + j * h.keys,
                        sizeof(float) * static_cast<size_t>(p + 1));
          }
        }
        break;
      case Reduce::Norm:
        for (int64_t t = 0; t < h.rows; ++t) {
          std::vector<double>& s = a.sumsq[h.position + t];
          s.resize(static_cast<size_t>(heads), 0.0);
          for (int64_t g = 0; g < h.width; ++g) s[static_cast<size_t>(h.column + g)] += v[t * h.width + g];
        }
        break;
      case Reduce::Mean: {
        a.sum.resize(static_cast<size_t>(probs ? heads : 1));
        const int64_t slot = probs ? h.keys : h.width;  // columns per "head" of this piece
        for (int64_t j = 0; j < h.width; ++j) {
          const int64_t head = probs ? h.column / h.keys + j / slot : 0;
          const int64_t col = probs ? j % slot : h.column + j;
          std::vector<double>& s = a.sum[static_cast<size_t>(head)];
          if (static_cast<int64_t>(s.size()) <= col) {
            s.resize(static_cast<size_t>(probs ? col + 1 : impl_->features(read.site)), 0.0);
          }
          s[static_cast<size_t>(col)] += read_double(v + 2 * j);
        }
        break;
      }
    }
  }
}

nlohmann::json ActivationStore::result() const {
  const TraceSpec& spec = *impl_->spec;
  const ModelConfig& c = impl_->config;
  nlohmann::json out = nlohmann::json::object();
  for (size_t r = 0; r < spec.reads.size(); ++r) {
    const ActivationRead& read = spec.reads[r];
    const std::vector<int64_t> layers = read.layers.empty() ? std::vector<int64_t>{-1} : read.layers;
    for (int64_t layer : layers) {
      static const Accumulator none;
      const auto it = impl_->acc.find({r, layer});
      const Accumulator& a = it == impl_->acc.end() ? none : it->second;
      const std::vector<int64_t> pos(a.positions.begin(), a.positions.end());
      const int64_t P = static_cast<int64_t>(pos.size()), first = P ? pos.front() : 0, end = P ? pos.back() + 1 : 0;
      const std::vector<int64_t> shape = read_shape(read, c, P, end);
      const Layout lay = layout_of(read.site);
      const int64_t heads = impl_->heads(read.site), F = impl_->features(read.site);
      const int64_t hd = lay == Layout::Rows ? F : F / heads;
      std::vector<float> data;
      if (read.reduce == Reduce::None) {
        if (lay == Layout::Rows || lay == Layout::HeadRows) {
          for (int64_t p : pos) data.insert(data.end(), a.rows.at(p).begin(), a.rows.at(p).end());
        } else if (lay == Layout::HeadsFirst) {  // [heads, P, hd]
          for (int64_t g = 0; g < heads; ++g) {
            for (int64_t p : pos) {
              const float* row = a.rows.at(p).data() + g * hd;
              data.insert(data.end(), row, row + hd);
            }
          }
        } else {  // probabilities [H, P, K]
          data.assign(static_cast<size_t>(heads * P * end), 0.0f);
          for (int64_t g = 0; g < heads; ++g) {
            for (int64_t t = 0; t < P; ++t) {
              const int64_t p = pos[static_cast<size_t>(t)];
              const float* row = a.rows.at(p).data() + g * (p + 1);
              std::memcpy(data.data() + (g * P + t) * end, row, sizeof(float) * static_cast<size_t>(p + 1));
            }
          }
        }
      } else if (read.reduce == Reduce::Norm) {
        const bool heads_first = lay == Layout::HeadsFirst || lay == Layout::Probabilities;
        data.assign(static_cast<size_t>(P * heads), 0.0f);
        for (int64_t t = 0; t < P; ++t) {
          const std::vector<double>& s = a.sumsq.at(pos[static_cast<size_t>(t)]);
          for (int64_t g = 0; g < heads; ++g) {
            data[static_cast<size_t>(heads_first ? g * P + t : t * heads + g)] =
                static_cast<float>(std::sqrt(s[static_cast<size_t>(g)]));
          }
        }
      } else {  // Mean
        const int64_t per_head = lay == Layout::Probabilities ? end : (a.sum.empty() ? 0 : F);
        const int64_t n_heads = lay == Layout::Probabilities ? heads : 1;
        data.assign(static_cast<size_t>(P ? n_heads * per_head : 0), 0.0f);
        for (int64_t g = 0; g < n_heads && P; ++g) {
          if (static_cast<size_t>(g) >= a.sum.size()) break;
          const std::vector<double>& s = a.sum[static_cast<size_t>(g)];
          for (size_t k = 0; k < s.size() && static_cast<int64_t>(k) < per_head; ++k) {
            data[static_cast<size_t>(g * per_head) + k] = static_cast<float>(s[k] / static_cast<double>(P));
          }
        }
      }
      int64_t expect = 1;
      for (int64_t d : shape) expect *= d;
      OLMO2_CHECK(static_cast<int64_t>(data.size()) == expect || P == 0, "activation ", read.key(layer), ": ",
                  data.size(), " values for its shape");
      if (P == 0) data.assign(static_cast<size_t>(expect), 0.0f);
      std::vector<uint8_t> bytes(data.size() * sizeof(float));
      if (!data.empty()) std::memcpy(bytes.data(), data.data(), bytes.size());  // little-endian hosts
      const char* reduce = read.reduce == Reduce::None ? "none" : read.reduce == Reduce::Norm ? "norm" : "mean";
      out[read.key(layer)] = {{"shape", shape},
                              {"dtype", "float32"},
                              {"positions", {first, end}},
                              {"reduce", reduce},
                              {"data", base64_encode(bytes)}};
    }
  }
  return out;
}

}  // namespace olmo2::trace
