// The error every OpenAI-compatible endpoint answers with (docs/architecture.md §8, API).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/serve/serve_request.h"

namespace olmo2 {

/// A request the API refuses: HTTP `status` with {"error": {"message", "type", "param"}}.
class ApiError : public InputError {
 public:
  ApiError(int status, std::string param, const std::string& message)
      : InputError(message, __FILE__, __LINE__), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  /// The offending field ("" when none): a top-level field ("logit_bias") or a path into
  /// one ("messages[2].content", "stream_options.include_usage").
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string param_;
};

/// {"error": {"message", "type", "param", "code"}}; type from the status
/// (invalid_request_error — also for 404, as OpenAI's —, authentication_error,
/// service_unavailable, server_error); param null when "".
nlohmann::json error_json(int status, const std::string& message, const std::string& param);

/// Serialises with invalid UTF-8 replaced by U+FFFD (token texts may hold partial
/// characters) and non-finite numbers as null (nlohmann's rule).
std::string dump_json(const nlohmann::json& j);

/// One server-sent event: "data: " + `payload` + "\n\n".
std::string sse_event(const std::string& payload);

/// The HTTP status of a request the engine gave up on: the chunk's error_status, else
/// 500 for an "internal …" error (the engine failed) and 503 otherwise (shutdown). The
/// same for a streamed request (the error event's code) and a non-streamed one.
int engine_error_status(const CompletionChunk& chunk);

}  // namespace olmo2
