#include "runtime/serve/api/structured_fields.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/grammar_cache.h"

namespace olmo2 {

using nlohmann::json;

namespace {

/// One constraint a request asked for: the field that asked (its param), what kind, and
/// its text (an ordered schema dump, a regex, a grammar) or choices.
struct Asked {
  std::string param;
  enum class Kind { Schema, Object, Regex, Choice, Grammar } kind;
  std::string text;
  std::vector<std::string> choices;
  structured::JsonSchemaOptions options;
};

/// The body again, keys in their order (for a schema's `properties` order).
class OrderedBody {
 public:
  explicit OrderedBody(const std::string& text) : text_(text) {}
  /// The ordered dump of the value at `path` (top-level field, then object keys).
  std::string dump(const std::vector<std::string>& path) {
    if (!body_) body_ = nlohmann::ordered_json::parse(text_);
    const nlohmann::ordered_json* v = &*body_;
    for (const std::string& key : path) v = &v->at(key);
    return v->dump();
  }

 private:
  const std::string& text_;
  std::optional<nlohmann::ordered_json> body_;
};

/// A schema value: an object, or (guided_json) a string holding one; its ordered text.
std::string schema_text(const Fields& f, const std::string& name, const json& v, bool string_ok, OrderedBody& body,
                        const std::vector<std::string>& path) {
  if (v.is_object()) return body.dump(path);
  if (string_ok && v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    nlohmann::ordered_json parsed;
    try {
      parsed = nlohmann::ordered_json::parse(s);
    } catch (const std::exception&) {
      f.fail(name, f.param(name) + " is not valid JSON: " + brief(v));
    }
    if (!parsed.is_object()) f.fail(name, f.param(name) + " must hold a JSON Schema object, got " + brief(v));
    return parsed.dump();
  }
  f.fail(name, f.param(name) + " must be a JSON Schema object" + (string_ok ? " (or a string holding one)" : "") +
                   ", got " + brief(v));
}

std::string string_field(const Fields& f, const std::string& name, const json& v) {
  if (!v.is_string()) f.fail(name, f.param(name) + " must be a string, got " + brief(v));
  return v.get<std::string>();
}

std::vector<std::string> choice_list(const Fields& f, const std::string& name, const json& v) {
  if (!v.is_array() || v.empty()) {
    f.fail(name, f.param(name) + " must be a non-empty list of strings, got " +
                     (v.is_array() ? std::string("an empty list") : brief(v)));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      f.fail(name, f.param(name) + "[" + std::to_string(i) + "] must be a string, got " + brief(v[i]));
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

void read_response_format(Fields& f, OrderedBody& body, std::vector<Asked>& asked, const ServedModel& served) {
  const json* rf = f.get("response_format");
  if (!rf) return;
  if (!rf->is_object()) f.fail("response_format", "response_format must be an object {\"type\": …}, got " + brief(*rf));
  Fields r(*rf, "response_format");
  const json* type = r.get("type");
  if (!type || !type->is_string() || (*type != "text" && *type != "json_object" && *type != "json_schema")) {
    r.fail("type", "response_format.type must be \"text\", \"json_object\" or \"json_schema\", got " +
                       (type ? brief(*type) : std::string("nothing")));
  }
  if (*type == "json_schema") {
    const json* js = r.get("json_schema");
    if (!js || !js->is_object()) {
      r.fail("json_schema", "response_format.json_schema is required with type \"json_schema\": an object {name, "
                            "schema, strict}");
    }
    Fields s(*js, "response_format.json_schema");
    const json* name = s.get("name");
    const auto valid_name = [](const std::string& n) {
      return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
      });
    };
    if (!name || !name->is_string() || !valid_name(name->get<std::string>())) {
      s.fail("name", "response_format.json_schema.name is required: 1 to 64 characters of a-z, A-Z, 0-9, _ and -, "
                     "got " + (name ? brief(*name) : std::string("nothing")));
    }
    if (const json* d = s.get("description"); d && !d->is_string()) {
      s.fail("description", "response_format.json_schema.description must be a string, got " + brief(*d));
    }
    s.boolean("strict", false);  // the schema is enforced either way
    const json* schema = s.get("schema");
    if (!schema) s.fail("schema", "response_format.json_schema.schema is required (a JSON Schema object)");
    Asked a{"response_format.json_schema.schema", Asked::Kind::Schema, "", {}, served.json_options};
    a.text = schema_text(s, "schema", *schema, false, body, {"response_format", "json_schema", "schema"});
    s.refuse_unread();
    asked.push_back(std::move(a));
  } else if (*type == "json_object") {
    asked.push_back({"response_format", Asked::Kind::Object, "", {}, served.json_options});
  }
  r.refuse_unread();
}

void read_structured_outputs(Fields& f, OrderedBody& body, std::vector<Asked>& asked, const ServedModel& served) {
  const json* so = f.get("structured_outputs");
  if (!so) return;
  if (!so->is_object()) f.fail("structured_outputs", "structured_outputs must be an object, got " + brief(*so));
  Fields s(*so, "structured_outputs");
  structured::JsonSchemaOptions options = served.json_options;
  if (const json* w = s.get("disable_any_whitespace")) {
    if (!w->is_boolean()) s.fail("disable_any_whitespace", "structured_outputs.disable_any_whitespace must be a bool");
    options.whitespace = w->get<bool>() ? structured::JsonSchemaOptions::Whitespace::Compact
                                        : structured::JsonSchemaOptions::Whitespace::Any;
  }
  if (s.boolean("disable_additional_properties", false)) options.additional_properties_default = false;
  s.boolean("disable_fallback", false);  // one engine: there is nothing to fall back to
  s.refuse("whitespace_pattern", "JSON whitespace is compact or any (--structured-whitespace, disable_any_whitespace)");
  s.refuse("structural_tag", "structural tags are not implemented");
  const size_t before = asked.size();
  if (const json* j = s.get("json")) {
    asked.push_back({"structured_outputs.json", Asked::Kind::Schema,
                     schema_text(s, "json", *j, true, body, {"structured_outputs", "json"}), {}, options});
  }
  if (const json* r = s.get("regex")) {
    asked.push_back({"structured_outputs.regex", Asked::Kind::Regex, string_field(s, "regex", *r), {}, options});
  }
  if (const json* c = s.get("choice")) {
    asked.push_back({"structured_outputs.choice", Asked::Kind::Choice, "", choice_list(s, "choice", *c), options});
  }
  if (const json* g = s.get("grammar")) {
    asked.push_back({"structured_outputs.grammar", Asked::Kind::Grammar, string_field(s, "grammar", *g), {}, options});
  }
  if (s.boolean("json_object", false)) {
    asked.push_back({"structured_outputs.json_object", Asked::Kind::Object, "", {}, options});
  }
  s.refuse_unread();
  if (asked.size() == before) {
    f.fail("structured_outputs", "structured_outputs names no constraint: give one of json, regex, choice, grammar, "
                                 "json_object");
  }
}

std::string key_of(const Asked& a) {
  static const char* kinds[] = {"schema", "object", "regex", "choice", "grammar"};
  std::string key = kinds[static_cast<int>(a.kind)];
  if (a.kind == Asked::Kind::Schema || a.kind == Asked::Kind::Object) {
    key += a.options.whitespace == structured::JsonSchemaOptions::Whitespace::Compact ? " compact" : " any";
    key += " " + std::to_string(a.options.max_whitespace) + (a.options.additional_properties_default ? " ap" : " noap");
  }
  key += "\n";
  if (a.kind == Asked::Kind::Choice) return key + json(a.choices).dump();
  return key + a.text;
}

std::string compile(const Asked& a) {
  switch (a.kind) {
    case Asked::Kind::Schema: return structured::json_schema_to_grammar(a.text, a.options);
    case Asked::Kind::Object: return structured::json_object_grammar(a.options);
    case Asked::Kind::Regex: return structured::regex_to_grammar(a.text);
    case Asked::Kind::Choice: return structured::choice_grammar(a.choices);
    case Asked::Kind::Grammar: return a.text;
  }
  return a.text;
}

}  // namespace

void read_structured_fields(Fields& f, const std::string& body_text, const ServedModel& served, CompletionParams& p) {
  OrderedBody body(body_text);
  std::vector<Asked> asked;
  read_response_format(f, body, asked, served);
  if (const json* j = f.get("guided_json")) {
    asked.push_back({"guided_json", Asked::Kind::Schema, schema_text(f, "guided_json", *j, true, body, {"guided_json"}),
                     {}, served.json_options});
  }
  if (const json* r = f.get("guided_regex")) {
    asked.push_back({"guided_regex", Asked::Kind::Regex, string_field(f, "guided_regex", *r), {}, served.json_options});
  }
  if (const json* c = f.get("guided_choice")) {
    asked.push_back({"guided_choice", Asked::Kind::Choice, "", choice_list(f, "guided_choice", *c), served.json_options});
  }
  if (const json* g = f.get("guided_grammar")) {
    asked.push_back(
        {"guided_grammar", Asked::Kind::Grammar, string_field(f, "guided_grammar", *g), {}, served.json_options});
  }
  if (const json* b = f.get("guided_decoding_backend"); b && !b->is_string()) {
    f.fail("guided_decoding_backend", "guided_decoding_backend must be a string, got " + brief(*b));
  }
  f.refuse("guided_whitespace_pattern",
           "JSON whitespace is compact or any (olmo2 serve --structured-whitespace; structured_outputs."
           "disable_any_whitespace)");
  read_structured_outputs(f, body, asked, served);
  if (asked.empty()) return;
  if (asked.size() > 1) {
    throw ApiError(400, asked[1].param,
                   "at most one structured-output constraint per request: " + asked[0].param + " and " +
                       asked[1].param + " were both given");
  }
  const Asked& a = asked[0];
  try {
    p.grammar = grammar_cache().get(key_of(a), [&] { return compile(a); });
    p.grammar_param = a.param;
  } catch (const structured::ConstraintError& e) {
    const std::string where = e.path().empty() ? "" : " (at " + e.path() + ")";
    throw ApiError(400, a.param, a.param + ": " + e.what() + where);
  } catch (const ApiError&) {
    throw;
  } catch (const InputError& e) {
    throw ApiError(400, a.param, a.param + ": " + e.what());
  }
  if (p.ignore_eos) {
    throw ApiError(400, "ignore_eos",
                   "ignore_eos cannot be combined with " + a.param + ": a constrained output ends where it is complete");
  }
}

}  // namespace olmo2
