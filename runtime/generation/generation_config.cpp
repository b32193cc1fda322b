#include "runtime/generation/generation_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/generation/request_rules.h"

namespace olmo2 {

namespace {

using nlohmann::json;

/// Typed reads of the fields of one generation_config.json, failures naming file and field.
struct FieldReader {
  const json& j;
  const std::string& path;

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    OLMO2_THROW(InputError, path, ": field \"", field, "\" ", why);
  }
  const json* find(const char* field) const {
    const auto it = j.find(field);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<double> number(const char* field) const {
    const json* v = find(field);
    if (!v) return std::nullopt;
    if (!v->is_number()) fail(field, "must be a number, got " + v->dump());
    return v->get<double>();
  }
  std::optional<int64_t> integer(const char* field) const {
    const json* v = find(field);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX})) {
      fail(field, "must be an integer, got " + v->dump());
    }
    return v->get<int64_t>();
  }
  std::optional<bool> boolean(const char* field) const {
    const json* v = find(field);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) fail(field, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  int64_t id(const char* field, const json& v, int64_t vocab) const {
    if (!v.is_number_integer()) fail(field, "must be a token id or a list of token ids, got " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x < 0 || x >= vocab || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})) {
      fail(field, "is " + v.dump() + ", outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    return x;
  }
  /// A rule of the API's rule book, its reason prefixed by the file.
  void check(const RuleVerdict& v) const {
    if (v) OLMO2_THROW(InputError, path, ": ", v->reason);
  }
};

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

bool GenerationDefaults::any() const {
  return temperature || top_p || top_k || min_p || repetition_penalty || max_new_tokens;
}

std::string GenerationDefaults::describe() const {
  std::string out;
  auto add = [&](const char* name, const std::string& value) { out += (out.empty() ? "" : ", ") + std::string(name) + " " + value; };
  if (temperature) add("temperature", number_text(*temperature));
  if (top_p) add("top_p", number_text(*top_p));
  if (top_k) add("top_k", std::to_string(*top_k));
  if (min_p) add("min_p", number_text(*min_p));
  if (repetition_penalty) add("repetition_penalty", number_text(*repetition_penalty));
  if (max_new_tokens) add("max_new_tokens", std::to_string(*max_new_tokens));
  if (do_sample) add("do_sample", *do_sample ? "true" : "false");
  return out.empty() ? "none" : out;
}

std::optional<GenerationConfig> read_generation_config(const std::string& dir, int64_t vocab_size) {
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::ifstream in(path);
  if (!in || !std::filesystem::is_regular_file(path)) OLMO2_THROW(InputError, path, ": cannot read the file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    OLMO2_THROW(InputError, path, " is not valid JSON: ", e.what());
  }
  if (!j.is_object()) OLMO2_THROW(InputError, path, " is not a JSON object");
  const FieldReader r{j, path};
  GenerationConfig g;
  g.path = path;
  if (const json* e = r.find("eos_token_id")) {
    if (e->is_array()) {
      for (const json& id : *e) g.eos_token_ids.push_back(r.id("eos_token_id", id, vocab_size));
    } else {
      g.eos_token_ids.push_back(r.id("eos_token_id", *e, vocab_size));
    }
  }
  if (const json* p = r.find("pad_token_id")) g.pad_token_id = r.id("pad_token_id", *p, vocab_size);
  if (const json* b = r.find("bos_token_id")) g.bos_token_id = r.id("bos_token_id", *b, vocab_size);
  GenerationDefaults& d = g.defaults;
  d.temperature = r.number("temperature");
  if (d.temperature) r.check(temperature_rule(*d.temperature));
  d.top_p = r.number("top_p");
  if (d.top_p) r.check(top_p_rule(*d.top_p));
  d.top_k = r.integer("top_k");
  if (d.top_k == -1) d.top_k = 0;  // vLLM's and transformers' "no limit"
  if (d.top_k) r.check(top_k_rule(*d.top_k));
  d.min_p = r.number("min_p");
  if (d.min_p) r.check(min_p_rule(*d.min_p));
  d.repetition_penalty = r.number("repetition_penalty");
  if (d.repetition_penalty) r.check(repetition_penalty_rule(*d.repetition_penalty));
  d.max_new_tokens = r.integer("max_new_tokens");
  if (d.max_new_tokens && *d.max_new_tokens < 1) {
    r.fail("max_new_tokens", "must be at least 1, got " + std::to_string(*d.max_new_tokens));
  }
  d.do_sample = r.boolean("do_sample");
  return g;
}

SamplingParams apply_generate_defaults(SamplingParams s, const GenerationDefaults& d, bool given_temperature,
                                       bool given_top_k, bool given_top_p) {
  if (!d.do_sample.value_or(false)) return s;
  if (!given_temperature) s.temperature = d.temperature.value_or(1.0);
  if (!given_top_k) s.top_k = d.top_k.value_or(50);
  if (!given_top_p && d.top_p) s.top_p = *d.top_p;
  if (d.min_p) s.min_p = *d.min_p;
  return s;
}

}  // namespace olmo2
