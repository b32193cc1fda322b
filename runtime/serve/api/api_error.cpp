#include "runtime/serve/api/api_error.h"

namespace olmo2 {

using nlohmann::json;

json error_json(int status, const std::string& message, const std::string& param) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 503 ? "service_unavailable"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)},
                     {"code", status}}}};
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const std::string& payload) { return "data: " + payload + "\n\n"; }

int engine_error_status(const CompletionChunk& chunk) {
  if (chunk.error_status != 0) return chunk.error_status;
  return chunk.error.rfind("internal", 0) == 0 ? 500 : 503;
}

}  // namespace olmo2
