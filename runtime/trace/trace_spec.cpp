// TraceSpec's behaviour (docs/architecture.md §13): which positions and sites it covers,
// its word encoding for a step's plan, the prefix cache's intervention key, and the
// shapes and worst-case bytes of its reads. Parsing from JSON is trace_spec_json.cpp.
#include "runtime/trace/trace_spec.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/error.h"

namespace olmo2::trace {

namespace {

/// Marks the start of an encoded spec, so that a plan read at the wrong offset fails loudly.
constexpr int64_t kSpecMagic = 0x54524143'45535043;  // "TRACESPC"

void put_positions(std::vector<int64_t>& w, const PositionSelector& p) {
  w.push_back(static_cast<int64_t>(p.kind));
  w.push_back(p.from);
  w.push_back(static_cast<int64_t>(p.list.size()));
  w.insert(w.end(), p.list.begin(), p.list.end());
}

void put_layers(std::vector<int64_t>& w, const std::vector<int64_t>& layers) {
  w.push_back(static_cast<int64_t>(layers.size()));
  w.insert(w.end(), layers.begin(), layers.end());
}

int64_t float_word(float f) { return static_cast<int64_t>(std::bit_cast<uint32_t>(f)); }

/// Every field of `iv`, floats by their bits: equal words exactly when equal interventions.
void put_intervention(std::vector<int64_t>& w, const Intervention& iv) {
  w.push_back(static_cast<int64_t>(iv.kind));
  w.push_back(static_cast<int64_t>(iv.site));
  put_layers(w, iv.layers);
  w.push_back(static_cast<int64_t>(iv.vector.size()));
  for (float f : iv.vector) w.push_back(float_word(f));
  w.push_back(float_word(iv.coefficient));
  w.push_back(iv.head);
  put_positions(w, iv.positions);
}

/// Reads words from `words` at `pos`, throwing Error instead of reading past the end.
class WordReader {
 public:
  WordReader(std::span<const int64_t> words, size_t& pos) : words_(words), pos_(pos) {}
  int64_t next(const char* what) {
    if (pos_ >= words_.size()) {
      OLMO2_THROW(Error, "malformed trace spec encoding: it ends at word ", pos_, " before its ", what);
    }
    return words_[pos_++];
  }
  /// A count of items of at least `min_words` words each that still fit in the encoding.
  size_t count(const char* what, size_t min_words) {
    const int64_t n = next(what);
    const size_t left = words_.size() - pos_;
    if (n < 0 || static_cast<uint64_t>(n) > left / std::max<size_t>(min_words, 1)) {
      OLMO2_THROW(Error, "malformed trace spec encoding: ", what, " ", n, " at word ", pos_ - 1, " with ", left,
                  " words left");
    }
    return static_cast<size_t>(n);
  }
  /// An enum value in [0, end).
  template <typename E>
  E enumerated(const char* what, int64_t end) {
    const int64_t v = next(what);
    if (v < 0 || v >= end) {
      OLMO2_THROW(Error, "malformed trace spec encoding: ", what, " ", v, " at word ", pos_ - 1, " is not in [0, ", end,
                  ")");
    }
    return static_cast<E>(v);
  }
  float real(const char* what) {
    const int64_t v = next(what);
    if (v < 0 || v > int64_t{std::numeric_limits<uint32_t>::max()}) {
      OLMO2_THROW(Error, "malformed trace spec encoding: ", what, " word ", v, " at word ", pos_ - 1,
                  " is not a float's 32 bits");
    }
    return std::bit_cast<float>(static_cast<uint32_t>(v));
  }
  std::vector<int64_t> list(const char* what) {
    const size_t n = count(what, 1);
    std::vector<int64_t> out(words_.begin() + static_cast<std::ptrdiff_t>(pos_),
                             words_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return out;
  }
  PositionSelector positions() {
    PositionSelector p;
    p.kind =
        enumerated<PositionSelector::Kind>("position kind", static_cast<int64_t>(PositionSelector::Kind::From) + 1);
    p.from = next("positions' from");
    p.list = list("position list length");
    return p;
  }
  /// A string's length, then its bytes, 8 to a word (little-endian).
  std::string text(const char* what) {
    const int64_t n = next(what);
    const size_t left = words_.size() - pos_;
    if (n < 0 || static_cast<uint64_t>(n) > 8 * static_cast<uint64_t>(left)) {
      OLMO2_THROW(Error, "malformed trace spec encoding: ", what, " ", n, " at word ", pos_ - 1, " with ", left,
                  " words left");
    }
    const size_t len = static_cast<size_t>(n);
    std::string s(len, '\0');
    for (size_t i = 0; i < len; i += 8) {
      const uint64_t w = static_cast<uint64_t>(next(what));
      for (size_t b = 0; b < 8 && i + b < len; ++b) s[i + b] = static_cast<char>((w >> (8 * b)) & 0xff);
    }
    return s;
  }

 private:
  std::span<const int64_t> words_;
  size_t& pos_;
};

void put_text(std::vector<int64_t>& w, const std::string& s) {
  w.push_back(static_cast<int64_t>(s.size()));
  for (size_t i = 0; i < s.size(); i += 8) {
    uint64_t word = 0;
    for (size_t b = 0; b < 8 && i + b < s.size(); ++b) word |= uint64_t{static_cast<uint8_t>(s[i + b])} << (8 * b);
    w.push_back(static_cast<int64_t>(word));
  }
}

/// a·b, or INT64_MAX when it would overflow (both ≥ 0).
int64_t saturating_mul(int64_t a, int64_t b) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return std::numeric_limits<int64_t>::max();
  return a * b;
}

int64_t saturating_add(int64_t a, int64_t b) {
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

}  // namespace

bool PositionSelector::contains(int64_t p, int64_t prompt_len) const {
  if (p < 0) return false;
  switch (kind) {
    case Kind::All:
      return true;
    case Kind::Prompt:
      return p < prompt_len;
    case Kind::Generated:
      return p >= prompt_len;
    case Kind::List:
      return std::binary_search(list.begin(), list.end(), p);
    case Kind::From:
      return p >= from;
  }
  return false;
}

std::string ActivationRead::key(int64_t layer) const {
  std::string k = layer < 0 ? name : "layers." + std::to_string(layer) + "." + name;
  if (reduce == Reduce::Norm) k += ":norm";
  if (reduce == Reduce::Mean) k += ":mean";
  return k;
}

bool TraceSpec::reads_prompt() const {
  return std::any_of(reads.begin(), reads.end(), [](const ActivationRead& r) {
    return r.positions.kind == PositionSelector::Kind::All || r.positions.kind == PositionSelector::Kind::Prompt;
  });
}

bool TraceSpec::touches(TapSite site, int64_t layer) const {
  const auto has = [layer](const std::vector<int64_t>& layers) {
    return layer < 0 ? layers.empty() : std::binary_search(layers.begin(), layers.end(), layer);
  };
  for (const ActivationRead& r : reads) {
    if (r.site == site && has(r.layers)) return true;
  }
  for (const Intervention& iv : interventions) {
    if (iv.site == site && layer >= 0 && has(iv.layers)) return true;
  }
  return false;
}

std::shared_ptr<const TraceSpec> TraceSpec::for_prompt(int64_t len) const {
  auto s = std::make_shared<TraceSpec>(*this);
  s->prompt_len = len;
  return s;
}

std::string TraceSpec::intervention_key() const {
  if (interventions.empty()) return "";
  std::vector<int64_t> words{static_cast<int64_t>(interventions.size())};
  for (const Intervention& iv : interventions) put_intervention(words, iv);
  // "prompt" and "generated" name positions relative to the prompt's end: the same
  // interventions steer other absolute positions for another prompt length (a later
  // turn whose prompt holds an earlier answer), so the key holds the length then.
  const bool relative = std::any_of(interventions.begin(), interventions.end(), [](const Intervention& iv) {
    return iv.positions.kind == PositionSelector::Kind::Prompt || iv.positions.kind == PositionSelector::Kind::Generated;
  });
  if (relative) words.push_back(prompt_len);
  std::string key(words.size() * sizeof(int64_t), '\0');
  for (size_t i = 0; i < words.size(); ++i) {
    const uint64_t w = static_cast<uint64_t>(words[i]);
    for (size_t b = 0; b < 8; ++b) key[8 * i + b] = static_cast<char>((w >> (8 * b)) & 0xff);
  }
  return key;
}

void TraceSpec::encode(std::vector<int64_t>& words) const {
  words.push_back(kSpecMagic);
  words.push_back(prompt_len);
  words.push_back(static_cast<int64_t>(reads.size()));
  for (const ActivationRead& r : reads) {
    put_text(words, r.name);
    words.push_back(static_cast<int64_t>(r.site));
    put_layers(words, r.layers);
    words.push_back(static_cast<int64_t>(r.reduce));
    put_positions(words, r.positions);
  }
  words.push_back(static_cast<int64_t>(interventions.size()));
  for (const Intervention& iv : interventions) put_intervention(words, iv);
}

TraceSpec TraceSpec::decode(std::span<const int64_t> words, size_t& pos) {
  WordReader in(words, pos);
  const size_t start = pos;
  if (in.next("start") != kSpecMagic) {
    OLMO2_THROW(Error, "malformed trace spec encoding: word ", start, " is not the start of a trace spec");
  }
  TraceSpec spec;
  spec.prompt_len = in.next("prompt length");
  const int64_t sites = static_cast<int64_t>(TapSite::Count);
  constexpr size_t kReadWords = 7, kInterventionWords = 9;  // the fewest words one takes
  spec.reads.resize(in.count("read count", kReadWords));
  for (ActivationRead& r : spec.reads) {
    r.name = in.text("name length");
    r.site = in.enumerated<TapSite>("read site", sites);
    r.layers = in.list("layer count");
    r.reduce = in.enumerated<Reduce>("reduce", static_cast<int64_t>(Reduce::Mean) + 1);
    r.positions = in.positions();
  }
  spec.interventions.resize(in.count("intervention count", kInterventionWords));
  for (Intervention& iv : spec.interventions) {
    iv.kind = in.enumerated<Intervention::Kind>("intervention kind",
                                                static_cast<int64_t>(Intervention::Kind::AblateHead) + 1);
    iv.site = in.enumerated<TapSite>("intervention site", sites);
    iv.layers = in.list("layer count");
    iv.vector.resize(in.count("vector length", 1));
    for (float& f : iv.vector) f = in.real("vector entry");
    iv.coefficient = in.real("coefficient");
    iv.head = in.next("head");
    iv.positions = in.positions();
  }
  return spec;
}

std::vector<int64_t> read_shape(const ActivationRead& read, const ModelConfig& config, int64_t positions,
                                int64_t keys) {
  OLMO2_CHECK(positions >= 0 && keys >= 0, "positions ", positions, ", keys ", keys);
  const int64_t hd = config.head_dim, H = config.num_attention_heads, KV = config.num_key_value_heads;
  // [heads, P, feature] (head_first) or [P, heads, feature]; heads 0: no head axis.
  int64_t heads = 0, feature = config.hidden_size;  // the residual stream's names
  bool head_first = false;
  switch (read.site) {
    case TapSite::AttentionQueries:
      heads = H, feature = hd, head_first = true;
      break;
    case TapSite::AttentionKeys:
    case TapSite::AttentionValues:
      heads = KV, feature = hd, head_first = true;
      break;
    case TapSite::AttentionProbabilities:
      heads = H, feature = keys, head_first = true;
      break;
    case TapSite::AttentionHeadOutputs:
      heads = H, feature = hd;
      break;
    case TapSite::MlpNeurons:
      feature = config.intermediate_size;
      break;
    case TapSite::LmHeadOutput:
      feature = config.vocab_size;
      break;
    case TapSite::Count:
      OLMO2_THROW(ShapeError, "read_shape: TapSite::Count is not a site");
    default:
      break;
  }
  std::vector<int64_t> shape;
  if (heads > 0 && head_first) shape.push_back(heads);
  if (read.reduce != Reduce::Mean) shape.push_back(positions);  // Mean drops the position axis
  if (heads > 0 && !head_first) shape.push_back(heads);
  if (read.reduce != Reduce::Norm) shape.push_back(feature);  // Norm drops the feature axis
  return shape;
}

int64_t activation_bytes(const TraceSpec& spec, const ModelConfig& config, int64_t prompt_len, int64_t max_tokens) {
  if (prompt_len < 0 || max_tokens < 0) {
    OLMO2_THROW(InputError, "activation_bytes: prompt length ", prompt_len, " and max_tokens ", max_tokens,
                " must be ≥ 0");
  }
  const int64_t fed = std::max<int64_t>(max_tokens - 1, 0);  // the last generated token is never fed
  int64_t total = 0;
  for (const ActivationRead& r : spec.reads) {
    int64_t positions = saturating_add(prompt_len, fed), keys = positions;
    if (r.positions.kind == PositionSelector::Kind::Prompt) positions = keys = prompt_len;
    if (r.positions.kind == PositionSelector::Kind::Generated) positions = fed;
    int64_t one = 4;  // f32
    for (int64_t d : read_shape(r, config, positions, keys)) one = saturating_mul(one, d);
    total = saturating_add(total, saturating_mul(one, std::max<int64_t>(1, static_cast<int64_t>(r.layers.size()))));
  }
  return total;
}

}  // namespace olmo2::trace
