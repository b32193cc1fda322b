// Olmo 3's attention fields of config.json: read in both spellings, written as
// transformers 5.24 writes them, described for `olmo2 info` (docs/architecture.md §3).
#include "runtime/model/config_olmo3.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"

namespace olmo2::config_detail {

const char* const kFull = "full_attention";
const char* const kSliding = "sliding_attention";

namespace {

using nlohmann::json;

/// One layer type's RoPE dict after transformers merges its sources, with the config.json
/// path each key came from (for messages).
struct RopeDict {
  json obj = json::object();
  std::map<std::string, std::string> from;  // key → "rope_scaling." or "rope_parameters.<type>."
  std::string default_prefix;

  std::string name(const std::string& key) const {
    auto it = from.find(key);
    return (it == from.end() ? default_prefix : it->second) + key;
  }
  const json* find(const std::string& key) const {
    auto it = obj.find(key);
    return (it == obj.end() || it->is_null()) ? nullptr : &*it;
  }
};

[[noreturn]] void refuse(const Reader& r, const std::string& field, const std::string& why) {
  OLMO2_THROW(InputError, r.source, ": field \"", field, "\" ", why);
}

/// The RoPE of one layer type from its merged dict; `theta` resolved by the caller.
RopeParameters parse_rope(const Reader& r, const RopeDict& d, double theta, int64_t max_pos) {
  static const std::set<std::string> kKnown = {
      "rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings",
      "attention_factor", "beta_fast", "beta_slow", "truncate"};
  for (const auto& [key, v] : d.obj.items()) {
    if (key == "mscale" || key == "mscale_all_dim" || key == "partial_rotary_factor") {
      if (v.is_null()) continue;
      refuse(r, d.name(key), "is " + v.dump() + "; this program does not compute " + key);
    }
    if (!kKnown.count(key)) refuse(r, d.name(key), "is not a RoPE parameter this program knows");
  }
  auto number = [&](const std::string& key) -> std::optional<double> {
    const json* v = d.find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) refuse(r, d.name(key), "must be a number, got " + v->dump());
    return v->get<double>();
  };

  RopeParameters p;
  p.theta = theta;
  const json* type = d.find("rope_type");
  const json* old_type = d.find("type");
  for (const json* t : {type, old_type}) {
    if (t && !t->is_string()) refuse(r, d.name(t == type ? "rope_type" : "type"), "must be a string, got " + t->dump());
  }
  if (type && old_type && *type != *old_type) {
    refuse(r, d.name("type"), "is " + old_type->dump() + " but " + d.name("rope_type") + " is " + type->dump() +
                                  " (transformers 5.24 reads rope_type); set rope_type");
  }
  const json* t = type ? type : old_type;
  p.type = t ? t->get<std::string>() : "default";
  const std::string type_field = d.name(type ? "rope_type" : "type");
  if (p.type != "default" && p.type != "yarn") {
    refuse(r, type_field, "is \"" + p.type + "\"; supported: \"default\", \"yarn\"");
  }
  if (p.type == "default") {
    for (const char* key : {"factor", "original_max_position_embeddings", "attention_factor",
                            "beta_fast", "beta_slow", "truncate"}) {
      if (const json* v = d.find(key)) {
        refuse(r, d.name(key), "is " + v->dump() + " but the RoPE type is \"default\" (YaRN's fields need \"yarn\")");
      }
    }
    return p;
  }

  const auto factor = number("factor");
  if (!factor) refuse(r, d.name("factor"), "is missing (YaRN needs it)");
  if (!(*factor >= 1) || !std::isfinite(*factor)) {
    refuse(r, d.name("factor"), "must be a finite number ≥ 1, got " + d.obj["factor"].dump());
  }
  p.factor = *factor;
  p.original_max_position_embeddings = max_pos;  // standardize_rope_params' default
  if (const json* v = d.find("original_max_position_embeddings")) {
    if (!v->is_number_integer()) {
      refuse(r, d.name("original_max_position_embeddings"), "must be an integer, got " + v->dump());
    }
    p.original_max_position_embeddings = v->get<int64_t>();
    if (p.original_max_position_embeddings <= 0) {
      refuse(r, d.name("original_max_position_embeddings"), "must be positive, got " + v->dump());
    }
  }
  if (const auto a = number("attention_factor")) {
    if (!(*a > 0) || !std::isfinite(*a)) {
      refuse(r, d.name("attention_factor"), "must be a finite number > 0, got " + d.obj["attention_factor"].dump());
    }
    p.attention_factor = *a;
  }
  for (const char* key : {"beta_fast", "beta_slow"}) {
    if (const auto b = number(key)) {
      if (!(*b > 0) || !std::isfinite(*b)) refuse(r, d.name(key), "must be a finite number > 0, got " + d.obj[key].dump());
      (std::string(key) == "beta_fast" ? p.beta_fast : p.beta_slow) = *b;
    }
  }
  if (p.beta_fast < p.beta_slow) {
    std::ostringstream why;
    why << "is " << p.beta_fast << ", below beta_slow " << p.beta_slow << " (the ramp needs beta_fast ≥ beta_slow)";
    refuse(r, d.name("beta_fast"), why.str());
  }
  if (const json* v = d.find("truncate")) {
    if (!v->is_boolean()) refuse(r, d.name("truncate"), "must be true or false, got " + v->dump());
    if (!v->get<bool>()) {
      // _compute_yarn_parameters reads truncate from the top of rope_parameters, which
      // per layer type never holds it: transformers 5.24 truncates regardless.
      refuse(r, d.name("truncate"), "is false, which transformers 5.24 ignores for per-layer-type RoPE (it truncates); remove it");
    }
  }
  return p;
}

std::vector<AttentionType> read_layer_types(const Reader& r, int64_t layers) {
  std::vector<AttentionType> types;
  const json* v = r.find("layer_types");
  if (!v) {  // Olmo3Config.__post_init__: every 4th layer full, the others sliding
    for (int64_t i = 0; i < layers; ++i) {
      types.push_back((i + 1) % 4 != 0 ? AttentionType::Sliding : AttentionType::Full);
    }
    return types;
  }
  if (!v->is_array()) r.fail("layer_types", "must be a list of layer types, got " + v->dump());
  if (static_cast<int64_t>(v->size()) != layers) {
    r.fail("layer_types", "has " + std::to_string(v->size()) + " entries but num_hidden_layers is " +
                              std::to_string(layers));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& t = (*v)[i];
    if (t == kFull) types.push_back(AttentionType::Full);
    else if (t == kSliding) types.push_back(AttentionType::Sliding);
    else {
      r.fail("layer_types", "has " + t.dump() + " at index " + std::to_string(i) +
                                "; supported: \"full_attention\", \"sliding_attention\"");
    }
  }
  return types;
}

}  // namespace

void read_olmo3_attention(const Reader& r, ModelConfig& c) {
  c.layer_types = read_layer_types(r, c.num_hidden_layers);
  if (r.j.contains("sliding_window")) {
    if (r.j["sliding_window"].is_null()) {
      if (c.has_sliding_layers()) r.fail("sliding_window", "is null but layer_types has sliding_attention layers");
    } else {
      c.sliding_window = r.positive("sliding_window");
      if (c.sliding_window > (int64_t{1} << 24)) {
        r.fail("sliding_window", "is " + std::to_string(c.sliding_window) + ", above the supported 16777216");
      }
    }
  } else {
    c.sliding_window = kOlmo3DefaultWindow;
  }

  // Olmo3Config.convert_rope_params_to_dict: rope_parameters per layer type (else
  // default RoPE for both), rope_scaling merged into full_attention's, rope_theta the
  // full layers' θ where they name none; sliding layers then get default_theta.
  std::optional<double> top_theta;
  if (r.find("rope_theta")) {
    top_theta = r.number("rope_theta");
    if (!(*top_theta > 0) || !std::isfinite(*top_theta)) r.fail("rope_theta", "must be positive, got " + r.j["rope_theta"].dump());
  }
  RopeDict full, sliding;
  full.default_prefix = "rope_parameters.full_attention.";
  sliding.default_prefix = "rope_parameters.sliding_attention.";
  if (const json* params = r.find("rope_parameters")) {
    if (!params->is_object()) r.fail("rope_parameters", "must be an object, got " + params->dump());
    for (const auto& [key, v] : params->items()) {
      if (key != kFull && key != kSliding) {
        r.fail("rope_parameters", "has key \"" + key + "\"; an Olmo 3 config nests RoPE per layer type "
                                  "(\"full_attention\", \"sliding_attention\")");
      }
      if (v.is_null()) continue;
      if (!v.is_object()) r.fail("rope_parameters." + key, "must be an object, got " + v.dump());
      (key == kFull ? full : sliding).obj = v;
    }
  }
  if (const json* scaling = r.find("rope_scaling")) {
    if (!scaling->is_object()) r.fail("rope_scaling", "must be an object or null, got " + scaling->dump());
    for (const auto& [key, v] : scaling->items()) {
      if (const json* had = full.find(key); had && *had != v) {
        OLMO2_THROW(InputError, r.source, ": rope_scaling.", key, " ", v.dump(),
                    " contradicts rope_parameters.full_attention.", key, " ", had->dump());
      }
      full.obj[key] = v;
      full.from[key] = "rope_scaling.";
    }
  }
  if (!full.obj.contains("rope_type") && (!r.find("rope_parameters") || !r.find("rope_parameters")->contains(kFull) ||
                                          (*r.find("rope_parameters"))[kFull].is_null())) {
    // convert_rope_params_to_dict starts full_attention at {"rope_type": "default"}; a
    // rope_scaling that says only "type" leaves it so.
    full.obj["rope_type"] = "default";
    full.from["rope_type"] = "(transformers 5.24's default) ";
  }
  if (r.find("rope_scaling") && !(r.find("rope_parameters") && r.find("rope_parameters")->contains(kFull))) {
    full.default_prefix = "rope_scaling.";  // what is missing is missing there
  }
  auto theta_of = [&](const RopeDict& d, bool is_full) {
    if (const json* v = d.find("rope_theta")) {
      if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>())) {
        refuse(r, d.name("rope_theta"), "must be a positive number, got " + v->dump());
      }
      if (top_theta && *top_theta != v->get<double>()) {
        OLMO2_THROW(InputError, r.source, ": rope_theta ", r.j["rope_theta"].dump(), " contradicts ",
                    d.name("rope_theta"), " ", v->dump());
      }
      return v->get<double>();
    }
    if (is_full) return top_theta.value_or(kOlmo3DefaultTheta);
    if (top_theta && *top_theta != kOlmo3DefaultTheta) {
      // transformers 4 gave sliding layers rope_theta too; 5.24 gives them default_theta.
      OLMO2_THROW(InputError, r.source, ": rope_theta ", r.j["rope_theta"].dump(),
                  " is ambiguous for sliding layers (transformers 4 applies it, 5.24 uses 500000); "
                  "set rope_parameters.sliding_attention.rope_theta");
    }
    return kOlmo3DefaultTheta;
  };
  c.rope_full = parse_rope(r, full, theta_of(full, true), c.max_position_embeddings);
  c.rope_sliding = parse_rope(r, sliding, theta_of(sliding, false), c.max_position_embeddings);
  c.rope_theta = c.rope_full.theta;
}

void read_olmo2_attention(const Reader& r, ModelConfig& c) {
  // transformers < 5 writes rope_theta (+ rope_scaling null); 5.x writes
  // rope_parameters {rope_type: "default", rope_theta}. Accept either, refuse a conflict.
  const json* params = r.find("rope_parameters");
  if (params) {
    if (!params->is_object()) r.fail("rope_parameters", "must be an object, got " + params->dump());
    auto type = params->find("rope_type");
    if (type != params->end() && *type != "default") {
      r.fail("rope_parameters", "has rope_type " + type->dump() + "; OLMo 2 uses plain RoPE (\"default\")");
    }
    auto th = params->find("rope_theta");
    if (th == params->end() || !th->is_number()) r.fail("rope_parameters", "has no numeric rope_theta");
    c.rope_theta = th->get<double>();
    if (r.find("rope_theta") && r.number("rope_theta") != c.rope_theta) {
      OLMO2_THROW(InputError, r.source, ": rope_theta ", r.number("rope_theta"),
                  " contradicts rope_parameters.rope_theta ", c.rope_theta);
    }
  } else {
    c.rope_theta = r.number("rope_theta");
  }
  if (r.find("rope_scaling")) {
    r.fail("rope_scaling", "is set; OLMo 2 uses plain RoPE (rope_scaling null)");
  }
  for (const char* f : {"layer_types", "sliding_window"}) {
    if (const json* v = r.find(f)) {
      r.fail(f, "is " + v->dump() + "; OLMo 2 has no sliding-window attention (Olmo3ForCausalLM has)");
    }
  }
  c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), AttentionType::Full);
  c.sliding_window = 0;
  c.rope_full = RopeParameters();  // "default"
  c.rope_full.theta = c.rope_theta;
  c.rope_sliding = c.rope_full;
}

namespace {

json rope_json(const RopeParameters& p) {
  json j = {{"rope_type", p.type}, {"rope_theta", p.theta}};
  if (p.type == "yarn") {
    j["factor"] = p.factor;
    j["original_max_position_embeddings"] = p.original_max_position_embeddings;
    if (p.attention_factor) j["attention_factor"] = *p.attention_factor;
    j["beta_fast"] = p.beta_fast;
    j["beta_slow"] = p.beta_slow;
  }
  return j;
}

std::string describe(const RopeParameters& p) {
  std::ostringstream s;
  s << p.type << ", theta " << p.theta;
  if (p.type == "yarn") {
    s << ", factor " << p.factor << ", original_max_position_embeddings " << p.original_max_position_embeddings
      << ", attention_factor ";
    if (p.attention_factor) s << *p.attention_factor;
    else s << "0.1·ln(factor)+1";
    s << ", beta_fast " << p.beta_fast << ", beta_slow " << p.beta_slow;
  }
  return s.str();
}

}  // namespace

void write_olmo3_attention(const ModelConfig& c, json& j) {
  j["model_type"] = "olmo3";
  j.erase("rope_theta");
  j.erase("rope_scaling");
  json types = json::array();
  for (AttentionType t : c.layer_types) types.push_back(t == AttentionType::Full ? kFull : kSliding);
  j["layer_types"] = types;
  j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  j["rope_parameters"] = {{kFull, rope_json(c.rope_full)}, {kSliding, rope_json(c.rope_sliding)}};
}

std::string olmo3_summary(const ModelConfig& c) {
  int64_t full = 0, sliding = 0;
  bool every_fourth = true;
  std::string pattern;
  for (size_t i = 0; i < c.layer_types.size(); ++i) {
    const bool f = c.layer_types[i] == AttentionType::Full;
    (f ? full : sliding) += 1;
    every_fourth = every_fourth && f == ((i + 1) % 4 == 0);
    pattern += f ? 'F' : 'S';
  }
  std::ostringstream s;
  s << "layer_types             sliding ×" << sliding << ", full ×" << full;
  if (every_fourth && full > 0) s << " (every 4th full)";
  else if (full > 0 && sliding > 0) s << " (" << pattern << ")";
  s << "\n"
    << "sliding_window          " << c.sliding_window << "\n"
    << "rope full_attention     " << describe(c.rope_full) << "\n"
    << "rope sliding_attention  " << describe(c.rope_sliding) << "\n";
  return s.str();
}

}  // namespace olmo2::config_detail

namespace olmo2 {

ModelConfig olmo3_config(const ModelConfig& base, int64_t window, const std::string& pattern,
                         std::optional<RopeParameters> full_rope) {
  ModelConfig c = base;
  c.architecture = "Olmo3ForCausalLM";
  if (c.layer_types.size() != static_cast<size_t>(c.num_hidden_layers)) {
    c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers), AttentionType::Full);
  }
  c.sliding_window = window;
  c.rope_sliding = RopeParameters();
  c.rope_sliding.theta = base.rope_theta;
  c.rope_full = full_rope.value_or(c.rope_sliding);
  if (c.rope_full.theta == 0) c.rope_full.theta = base.rope_theta;
  nlohmann::json j = c.to_json();  // written as an Olmo 3 config.json, then read back
  j["sliding_window"] = window;    // as given: from_json judges it
  if (pattern.empty()) {
    j.erase("layer_types");
  } else {
    nlohmann::json& types = j["layer_types"];
    for (size_t i = 0; i < types.size(); ++i) {
      const char letter = pattern[i % pattern.size()];
      if (letter != 'S' && letter != 'F') {
        OLMO2_THROW(InputError, "layer pattern \"", pattern, "\" has '", std::string(1, letter),
                    "'; use S (sliding) and F (full)");
      }
      types[i] = letter == 'S' ? config_detail::kSliding : config_detail::kFull;
    }
  }
  return ModelConfig::from_json(j, "olmo3_config");
}

}  // namespace olmo2
