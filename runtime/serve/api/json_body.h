// A request body parsed as JSON, with the API's errors (docs/architecture.md §8).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace olmo2 {

/// Parses `text` as JSON. Throws ApiError (400): param "" when it is not JSON; param =
/// the top-level field when a number in it overflows a double (nlohmann::json refuses
/// `1e999` with out_of_range.406 rather than giving inf), named in the message with the
/// number.
nlohmann::json parse_json_body(const std::string& text);

}  // namespace olmo2
