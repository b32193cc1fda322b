// Internal to runtime/model/config*.cpp: typed, named reads of one config.json object.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace olmo2::config_detail {

/// Reads fields of the JSON object `j` (a config.json or a nested part of one). Every
/// failure is an InputError "`source`: field "`prefix``field`" why", so a nested field is
/// named by its path (e.g. rope_parameters.full_attention.factor). JSON null reads as
/// missing, as transformers treats it.
struct Reader {
  const nlohmann::json& j;
  const std::string& source;
  std::string prefix = "";

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    OLMO2_THROW(InputError, source, ": field \"", prefix, field, "\" ", why);
  }
  const nlohmann::json* find(const std::string& field) const {
    auto it = j.find(field);
    return (it == j.end() || it->is_null()) ? nullptr : &*it;
  }
  int64_t integer(const std::string& field, std::optional<int64_t> fallback = {}) const {
    const nlohmann::json* v = find(field);
    if (!v) {
      if (fallback) return *fallback;
      fail(field, "is missing");
    }
    if (!v->is_number_integer()) fail(field, "must be an integer, got " + v->dump());
    return v->get<int64_t>();
  }
  int64_t positive(const std::string& field, std::optional<int64_t> fallback = {}) const {
    const int64_t x = integer(field, fallback);
    if (x <= 0) fail(field, "must be positive, got " + std::to_string(x));
    return x;
  }
  double number(const std::string& field, std::optional<double> fallback = {}) const {
    const nlohmann::json* v = find(field);
    if (!v) {
      if (fallback) return *fallback;
      fail(field, "is missing");
    }
    if (!v->is_number()) fail(field, "must be a number, got " + v->dump());
    return v->get<double>();
  }
  bool boolean(const std::string& field, bool fallback) const {
    const nlohmann::json* v = find(field);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(field, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::optional<int64_t> token_id(const std::string& field) const {
    const nlohmann::json* v = find(field);
    if (!v) return std::nullopt;
    if (v->is_array() && !v->empty() && (*v)[0].is_number_integer()) return (*v)[0].get<int64_t>();
    if (!v->is_number_integer()) fail(field, "must be a token id, got " + v->dump());
    return v->get<int64_t>();
  }
};

}  // namespace olmo2::config_detail
