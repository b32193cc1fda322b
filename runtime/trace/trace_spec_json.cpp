// parse_trace_request (docs/architecture.md §13): a request's `activations` and
// `interventions` by nnterp's standard names, checked against the model before the
// request is queued. Every refusal is an InputError that starts with the offending field
// ("activations[2].name") and shows its value.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "runtime/trace/trace_spec.h"

namespace olmo2::trace {

using nlohmann::json;

namespace {

static_assert(std::endian::native == std::endian::little, "vectors are read as little-endian f32 in place");

struct NameInfo {
  std::string_view name;
  TapSite site;
  bool per_layer;
};

// nnterp's names for OLMo 2, in the order the forward reaches them (forward_tap.h).
constexpr NameInfo kNames[] = {
    {"token_embeddings", TapSite::TokenEmbeddings, false},
    {"layer_input", TapSite::LayerInput, true},
    {"attention_queries", TapSite::AttentionQueries, true},
    {"attention_keys", TapSite::AttentionKeys, true},
    {"attention_values", TapSite::AttentionValues, true},
    {"attention_probabilities", TapSite::AttentionProbabilities, true},
    {"attention_premix", TapSite::AttentionHeadOutputs, true},
    {"attention_head_outputs", TapSite::AttentionHeadOutputs, true},
    {"attention_output", TapSite::AttentionOutput, true},
    {"layer_mid", TapSite::LayerMid, true},
    {"mlp_input", TapSite::LayerMid, true},
    {"mlp_neurons", TapSite::MlpNeurons, true},
    {"mlp_output", TapSite::MlpOutput, true},
    {"layer_output", TapSite::LayerOutput, true},
    {"final_norm_output", TapSite::FinalNormOutput, false},
    {"lm_head_output", TapSite::LmHeadOutput, false},
    {"logits", TapSite::LmHeadOutput, false},
};

/// A JSON value for a message: strings quoted and cut at 60 bytes, containers by kind.
std::string shown(const json& v) {
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    return s.size() <= 60 ? json(s).dump(-1, ' ', false, json::error_handler_t::replace)
                          : json(s.substr(0, 60)).dump(-1, ' ', false, json::error_handler_t::replace) + "…";
  }
  return v.dump();
}

std::string shown(const std::string& s) { return shown(json(s)); }

[[noreturn]] void fail(const std::string& field, const std::string& message) {
  OLMO2_THROW(InputError, field, ": ", message);
}

std::string known_names() {
  std::string model_wide, per_layer;
  for (const NameInfo& n : kNames) {
    std::string& list = n.per_layer ? per_layer : model_wide;
    list += (list.empty() ? "" : ", ") + std::string(n.name);
  }
  return "model-wide " + model_wide + "; per layer (layers.<N|*|A:B>.<name>) " + per_layer;
}

/// The value of `key` in `object`, or nullptr when absent or null.
const json* field_of(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

/// Refuses a key of `object` (not null) outside `known`: a typo must not be ignored.
void check_keys(const json& object, const std::string& field, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    if (value.is_null() || std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    fail(field + "." + key, "unknown field " + shown(key) + " (known here: " + list + ")");
  }
}

/// An integer in [min, max): a JSON integer or a float with an integral value.
int64_t integer_in(const json& v, const std::string& field, int64_t min, int64_t max) {
  std::optional<int64_t> x;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) x = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) &&
             std::fabs(v.get<double>()) < 9e18) {
    x = static_cast<int64_t>(v.get<double>());
  }
  if (!x || *x < min || *x >= max) {
    const std::string range = max == INT64_MAX ? " ≥ " + std::to_string(min)
                                               : " in [" + std::to_string(min) + ", " + std::to_string(max) + ")";
    fail(field, "must be an integer" + range + ", got " + shown(v));
  }
  return *x;
}

/// A layer selector's number: decimal digits only (nullopt otherwise); INT64_MAX for more
/// than 18 digits, out of every range.
std::optional<int64_t> decimal(std::string_view s) {
  if (s.empty()) return std::nullopt;
  int64_t x = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    if (x < 100'000'000'000'000'000) x = 10 * x + (c - '0');  // ≤ 18 digits: no overflow
  }
  return s.size() > 18 ? INT64_MAX : x;
}

struct Named {
  const NameInfo* info = nullptr;
  std::vector<int64_t> layers;  // ascending; empty for a model-wide name
};

/// "name" or "layers.<sel>.name", checked against the name table and the model's layers.
Named parse_name(const std::string& text, const std::string& field, const ModelConfig& config) {
  const std::string at = shown(text) + ": ";
  std::string_view rest = text;
  std::optional<std::string_view> selector;
  if (rest.starts_with("layers.")) {
    rest.remove_prefix(7);
    const size_t dot = rest.find('.');
    if (dot == std::string_view::npos) fail(field, at + "expected layers.<N|*|A:B>.<name>");
    selector = rest.substr(0, dot);
    rest.remove_prefix(dot + 1);
  }
  if (rest == "attention_norm_output" || rest == "mlp_norm_output") {
    fail(field, at + "unavailable: OLMo 2 has no pre-norm: read layer_input / layer_mid (the attention reads "
                     "layer_input itself, the MLP layer_mid)");
  }
  Named out;
  for (const NameInfo& n : kNames) {
    if (n.name == rest) out.info = &n;
  }
  if (!out.info) fail(field, at + "unknown activation name " + shown(std::string(rest)) + "; known: " + known_names());
  const std::string name(rest);
  if (!out.info->per_layer) {
    if (selector) fail(field, at + name + " is model-wide and takes no layer: write " + shown(name));
    return out;
  }
  if (!selector) fail(field, at + name + " is per layer: write layers.<N|*|A:B>." + name);
  const int64_t layers = config.num_hidden_layers;
  const std::string_view sel = *selector;
  const std::string range =
      "the model has " + std::to_string(layers) + " layers (0 … " + std::to_string(layers - 1) + ")";
  int64_t begin = 0, end = layers;
  if (sel != "*") {
    const size_t colon = sel.find(':');
    if (colon == std::string_view::npos) {
      const std::optional<int64_t> n = decimal(sel);
      if (!n) fail(field, at + "layer selector " + shown(std::string(sel)) + " is not N, * or A:B");
      if (*n >= layers) fail(field, at + "layer " + std::string(sel) + " is out of range: " + range);
      begin = *n, end = *n + 1;
    } else {
      const std::optional<int64_t> a = decimal(sel.substr(0, colon)), b = decimal(sel.substr(colon + 1));
      if (!a || !b) fail(field, at + "layer selector " + shown(std::string(sel)) + " is not N, * or A:B");
      if (*a >= *b) fail(field, at + "layer range " + std::string(sel) + " is empty (A:B means layers A … B−1)");
      if (*b > layers) fail(field, at + "layer range " + std::string(sel) + " ends past the last layer: " + range);
      begin = *a, end = *b;
    }
  }
  for (int64_t l = begin; l < end; ++l) out.layers.push_back(l);
  return out;
}

Reduce parse_reduce(const json& v, const std::string& field) {
  if (v == "none") return Reduce::None;
  if (v == "norm") return Reduce::Norm;
  if (v == "mean") return Reduce::Mean;
  fail(field, "must be \"none\", \"norm\" or \"mean\", got " + shown(v));
}

/// "all" | "prompt" | "generated"; with `lists`, also [p, …] (ascending, unique, ≥ 0) or
/// {"from": p}.
PositionSelector parse_positions(const json& v, const std::string& field, bool lists) {
  PositionSelector p;
  if (v == "all") return p;
  if (v == "prompt") return p.kind = PositionSelector::Kind::Prompt, p;
  if (v == "generated") return p.kind = PositionSelector::Kind::Generated, p;
  if (lists && v.is_array()) {
    if (v.empty()) fail(field, "lists no position: give at least one (or leave the intervention out)");
    p.kind = PositionSelector::Kind::List;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string at = field + "[" + std::to_string(i) + "]";
      p.list.push_back(integer_in(v[i], at, 0, INT64_MAX));
      if (i > 0 && p.list[i] <= p.list[i - 1]) {
        fail(at, std::to_string(p.list[i]) + " does not come after " + std::to_string(p.list[i - 1]) +
                     ": positions must be ascending, without repeats");
      }
    }
    return p;
  }
  if (lists && v.is_object()) {
    check_keys(v, field, {"from"});
    const json* from = field_of(v, "from");
    if (!from) fail(field + ".from", "is required in {\"from\": p}");
    p.kind = PositionSelector::Kind::From;
    p.from = integer_in(*from, field + ".from", 0, INT64_MAX);
    return p;
  }
  fail(field, std::string("must be \"all\", \"prompt\" or \"generated\"") +
                  (lists ? ", a list of positions or {\"from\": p}" : " (lists of positions are for interventions)") +
                  ", got " + shown(v));
}

ActivationRead parse_read(const json& entry, const std::string& field, const ModelConfig& config) {
  ActivationRead r;
  std::string name_field = field;
  if (entry.is_object()) {
    check_keys(entry, field, {"name", "reduce", "positions"});
    name_field = field + ".name";
    const json* name = field_of(entry, "name");
    if (!name || !name->is_string()) {
      fail(name_field, "must be a name string such as \"layers.0.layer_output\", got " +
                           (name ? shown(*name) : std::string("nothing")));
    }
    r.name = name->get<std::string>();
    if (const json* reduce = field_of(entry, "reduce")) r.reduce = parse_reduce(*reduce, field + ".reduce");
    if (const json* positions = field_of(entry, "positions")) {
      r.positions = parse_positions(*positions, field + ".positions", false);
    }
  } else if (entry.is_string()) {
    r.name = entry.get<std::string>();
  } else {
    fail(field, "must be a name string or {\"name\", \"reduce\", \"positions\"}, got " + shown(entry));
  }
  Named named = parse_name(r.name, name_field, config);
  r.name = named.info->name;  // the name as asked (an alias stays an alias), without its layers
  r.site = named.info->site;
  r.layers = std::move(named.layers);
  return r;
}

Intervention parse_add(const json& entry, const std::string& field, const ModelConfig& config) {
  check_keys(entry, field, {"type", "name", "vector", "coefficient", "positions"});
  Intervention iv;
  const json* name = field_of(entry, "name");
  if (!name || !name->is_string()) {
    fail(field + ".name", "must be \"layers.<N|*|A:B>.(layer_output|attention_output|mlp_output)\", got " +
                              (name ? shown(*name) : std::string("nothing")));
  }
  const Named named = parse_name(name->get<std::string>(), field + ".name", config);
  iv.site = named.info->site;
  if (iv.site != TapSite::LayerOutput && iv.site != TapSite::AttentionOutput && iv.site != TapSite::MlpOutput) {
    fail(field + ".name", shown(*name) +
                              ": add changes only layers.<sel>.layer_output, attention_output or "
                              "mlp_output (the residual stream and what is added to it)");
  }
  iv.layers = named.layers;
  const json* vector = field_of(entry, "vector");
  if (!vector || !vector->is_string()) {
    fail(field + ".vector", "must be base64 of " + std::to_string(config.hidden_size) + " little-endian float32, got " +
                                (vector ? shown(*vector) : std::string("nothing")));
  }
  const std::vector<uint8_t> bytes = base64_decode(vector->get<std::string>(), field + ".vector");
  const size_t want = 4 * static_cast<size_t>(config.hidden_size);
  if (bytes.size() != want) {
    fail(field + ".vector", "decodes to " + std::to_string(bytes.size()) +
                                " bytes, need 4·hidden_size = " + std::to_string(want) + " (" +
                                std::to_string(config.hidden_size) + " little-endian float32)");
  }
  iv.vector.resize(static_cast<size_t>(config.hidden_size));
  std::memcpy(iv.vector.data(), bytes.data(), bytes.size());
  for (size_t i = 0; i < iv.vector.size(); ++i) {
    if (!std::isfinite(iv.vector[i])) {
      fail(field + ".vector", "entry " + std::to_string(i) + " is not finite: " + json(iv.vector[i]).dump() + " (" +
                                  std::to_string(iv.vector[i]) + ")");
    }
  }
  if (const json* c = field_of(entry, "coefficient")) {
    const bool number = c->is_number();
    iv.coefficient = number ? static_cast<float>(c->get<double>()) : 0.0f;
    if (!number || !std::isfinite(iv.coefficient)) {
      fail(field + ".coefficient", "must be a finite float32 number, got " + shown(*c));
    }
  }
  // What is added, coefficient · vector in f32, must stay finite too.
  for (size_t i = 0; i < iv.vector.size(); ++i) {
    if (!std::isfinite(iv.coefficient * iv.vector[i])) {
      fail(field + ".coefficient", "times vector entry " + std::to_string(i) + " (" + json(iv.vector[i]).dump() +
                                       ") overflows float32: " + json(iv.coefficient).dump());
    }
  }
  return iv;
}

Intervention parse_ablate_head(const json& entry, const std::string& field, const ModelConfig& config) {
  check_keys(entry, field, {"type", "layer", "head", "positions"});
  Intervention iv;
  iv.kind = Intervention::Kind::AblateHead;
  iv.site = TapSite::AttentionHeadOutputs;
  const json* layer = field_of(entry, "layer");
  const json* head = field_of(entry, "head");
  if (!layer) fail(field + ".layer", "is required: the layer whose head is ablated");
  if (!head) fail(field + ".head", "is required: the query head to ablate");
  iv.layers = {integer_in(*layer, field + ".layer", 0, config.num_hidden_layers)};
  iv.head = integer_in(*head, field + ".head", 0, config.num_attention_heads);
  return iv;
}

}  // namespace

TraceSpec parse_trace_request(const json* activations, const json* interventions, const ModelConfig& config) {
  TraceSpec spec;
  if (activations && !activations->is_null()) {
    if (!activations->is_array()) fail("activations", "must be a list of names, got " + shown(*activations));
    std::map<std::string, size_t> keys;  // response key → the entry that asks for it
    for (size_t i = 0; i < activations->size(); ++i) {
      const std::string field = "activations[" + std::to_string(i) + "]";
      ActivationRead r = parse_read((*activations)[i], field, config);
      const std::vector<int64_t> layers = r.layers.empty() ? std::vector<int64_t>{-1} : r.layers;
      for (int64_t layer : layers) {
        const auto [it, fresh] = keys.emplace(r.key(layer), i);
        if (!fresh) {
          fail(field, "asks again for " + shown(it->first) + ", which activations[" + std::to_string(it->second) +
                          "] already reads (a response key must be unique)");
        }
      }
      spec.reads.push_back(std::move(r));
    }
  }
  if (interventions && !interventions->is_null()) {
    if (!interventions->is_array()) fail("interventions", "must be a list, got " + shown(*interventions));
    for (size_t i = 0; i < interventions->size(); ++i) {
      const std::string field = "interventions[" + std::to_string(i) + "]";
      const json& entry = (*interventions)[i];
      if (!entry.is_object())
        fail(field, "must be an object {\"type\": \"add\" | \"ablate_head\", …}, got " + shown(entry));
      const json* type = field_of(entry, "type");
      Intervention iv;
      if (type && *type == "add") {
        iv = parse_add(entry, field, config);
      } else if (type && *type == "ablate_head") {
        iv = parse_ablate_head(entry, field, config);
      } else {
        fail(field + ".type",
             "must be \"add\" or \"ablate_head\", got " + (type ? shown(*type) : std::string("nothing")));
      }
      if (const json* positions = field_of(entry, "positions")) {
        iv.positions = parse_positions(*positions, field + ".positions", true);
      }
      spec.interventions.push_back(std::move(iv));
    }
  }
  return spec;
}

}  // namespace olmo2::trace
