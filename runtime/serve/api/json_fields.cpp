#include "runtime/serve/api/json_fields.h"

#include <cmath>

#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/json_body.h"

namespace olmo2 {

using nlohmann::json;

json parse_body(const std::string& text) {
  json body = parse_json_body(text);
  if (!body.is_object()) {
    throw ApiError(400, "", "the request body must be a JSON object, got " + std::string(body.type_name()));
  }
  return body;
}

std::string brief(const json& v) {
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  if (v.is_string()) {
    const std::string& t = v.get_ref<const std::string&>();
    return t.size() <= 40 ? dump_json(json(t)) : dump_json(json(t.substr(0, 40))) + "…";
  }
  return v.dump();  // a number, a boolean or null
}

Fields::Fields(const json& object, std::string path) : object_(object), path_(std::move(path)) {}

std::string Fields::param(std::string_view name) const {
  return path_.empty() ? std::string(name) : path_ + "." + std::string(name);
}

void Fields::fail(std::string_view name, const std::string& message) const {
  throw ApiError(400, param(name), message);
}

const json* Fields::get(const std::string& name) {
  read_.insert(name);
  const auto it = object_.find(name);
  return it == object_.end() || it->is_null() ? nullptr : &*it;
}

int64_t Fields::integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) {
  const json* v = get(name);
  if (!v) return fallback;
  const std::string range = max != INT64_MAX   ? " in [" + std::to_string(min) + ", " + std::to_string(max) + "]"
                            : min != INT64_MIN ? " ≥ " + std::to_string(min)
                                               : "";
  int64_t x = 0;
  bool ok = false;
  // A whole number past 64 bits (an unsigned one, or one JSON could only give as a
  // double, such as 1e20 or 2^64) is out of range, not "not an integer".
  const auto too_large = [&] {
    fail(name, param(name) + " is too large: " + brief(*v) + " (it must be an integer" +
                   (range.empty() ? " of at most 64 bits" : range) + ")");
  };
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) too_large();
  if (v->is_number_integer()) {
    x = v->get<int64_t>(), ok = true;
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d == std::floor(d) && std::fabs(d) >= 9e18) too_large();
    ok = d == std::floor(d) && std::fabs(d) < 9e18;
    x = ok ? static_cast<int64_t>(d) : 0;
  }
  if (!ok || x < min || x > max) fail(name, param(name) + " must be an integer" + range + ", got " + brief(*v));
  return x;
}

double Fields::number(const std::string& name, double fallback, double min, double max) {
  const json* v = get(name);
  if (!v) return fallback;
  if (!v->is_number()) fail(name, param(name) + " must be a number, got " + brief(*v));
  const double x = v->get<double>();
  if (!(x >= min && x <= max)) {
    fail(name, param(name) + " must be in [" + json(min).dump() + ", " + json(max).dump() + "], got " + brief(*v));
  }
  return x;
}

bool Fields::boolean(const std::string& name, bool fallback) {
  const json* v = get(name);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(name, param(name) + " must be true or false, got " + brief(*v));
  return v->get<bool>();
}

void Fields::ignore(const std::string& name) { read_.insert(name); }

void Fields::refuse(const std::string& name, const std::string& why, std::initializer_list<json> no_ops) {
  const json* v = get(name);
  if (!v) return;
  for (const json& ok : no_ops) {
    if (*v == ok) return;
  }
  fail(name, param(name) + " is not supported by this server: " + why);
}

void Fields::refuse_unread() const {
  for (const auto& [key, value] : object_.items()) {
    if (value.is_null() || read_.count(key)) continue;
    fail(key, "unknown field " + param(key) +
                  ": this server does not implement it, and a field that may change the output is refused "
                  "rather than ignored");
  }
}

}  // namespace olmo2
