#include "runtime/serve/api/json_body.h"

#include "runtime/serve/api/api_error.h"

namespace olmo2 {

namespace {
using nlohmann::json;

/// The top-level field being parsed when `text` fails: a second parse that records each
/// key at depth 1 and fails at the same place ("" when the failure is outside an object).
std::string field_at_failure(const std::string& text) {
  std::string field;
  try {
    // Nothing is kept (the callback answers false): only the keys are wanted.
    [[maybe_unused]] const json discarded = json::parse(text, [&field](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1) field = parsed.get<std::string>();
      return false;
    });
  } catch (const json::exception&) {
  }
  return field;
}
}  // namespace

json parse_json_body(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw ApiError(400, "", std::string("the request body is not valid JSON: ") + e.what());
  } catch (const json::out_of_range& e) {
    // "[json.exception.out_of_range.406] number overflow parsing '1e999'"
    std::string number = e.what();
    const size_t open = number.find('\''), close = number.rfind('\'');
    number = open != std::string::npos && close > open ? number.substr(open + 1, close - open - 1) : "a number";
    const std::string field = field_at_failure(text);
    throw ApiError(400, field,
                   (field.empty() ? std::string("the request body") : field) + ": the number " + number +
                       " is out of range (beyond the largest double, about 1.8e308)");
  }
}

}  // namespace olmo2
