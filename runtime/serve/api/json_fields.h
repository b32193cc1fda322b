// Reading a JSON request body field by field (docs/architecture.md §8, API): typed readers
// that name the field in every refusal, and a record of the fields read, so that nothing
// a client sends is silently ignored.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace olmo2 {

/// Parses a request body, which must be a JSON object (parse_json_body, json_body.h, then
/// the object check). Throws ApiError 400: param "" for text that is not JSON or not an
/// object; a number too large for a double (1e999) names the top-level field holding it.
nlohmann::json parse_body(const std::string& text);

/// A value for an error message: a scalar as JSON (strings cut at 40 bytes), a
/// container by its kind only — never dumped whole: a deeply nested value would recurse.
std::string brief(const nlohmann::json& v);

/// The fields of one JSON object, each read by name. JSON null is "not given" for every
/// field. Every reader throws ApiError 400 naming the field (param(name)) and the value.
class Fields {
 public:
  /// `object` (a JSON object) must outlive this. `path` prefixes the param names: "" at
  /// the top level, "stream_options" gives "stream_options.include_usage".
  explicit Fields(const nlohmann::json& object, std::string path = "");

  /// The name an error reports for field `name`.
  std::string param(std::string_view name) const;
  /// The value, or nullptr when absent or null; marks the field read.
  const nlohmann::json* get(const std::string& name);
  /// An integer in [min, max]: a JSON integer, or a float with an integral value (8.0);
  /// `fallback` when not given.
  int64_t integer(const std::string& name, int64_t fallback, int64_t min, int64_t max);
  /// A number in [min, max] (parse_body already refused non-finite ones).
  double number(const std::string& name, double fallback, double min, double max);
  /// true or false; `fallback` when not given.
  bool boolean(const std::string& name, bool fallback);
  /// Marks `name` read without using it: for fields that cannot change the output.
  void ignore(const std::string& name);
  /// Refuses `name` ("`name` is not supported by this server: `why`") unless it is not
  /// given or equals one of `no_ops`, the values that ask for nothing.
  void refuse(const std::string& name, const std::string& why, std::initializer_list<nlohmann::json> no_ops = {});
  /// Refuses the first field (in key order) that is not null and was not read, as a
  /// field this server does not know: it might change the output, so it is never ignored.
  void refuse_unread() const;
  /// Throws ApiError 400 with param(name) and `message`.
  [[noreturn]] void fail(std::string_view name, const std::string& message) const;

 private:
  const nlohmann::json& object_;
  std::string path_;
  std::set<std::string, std::less<>> read_;
};

}  // namespace olmo2
