// A parsed /v1/completions or /v1/chat/completions request (docs/architecture.md §8, API):
// one CompletionParams per prompt, and what the response needs to be assembled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/serve/api/tool_fields.h"
#include "runtime/serve/serve_request.h"

namespace olmo2 {

enum class ApiEndpoint { Completions, Chat };

/// What completion_request.h and chat_request.h make of a body. The route submits one
/// ServeRequest per element of `prompts` (in order) and feeds their chunks to a
/// ResponseAssembler (response_assembler.h).
struct ApiRequest {
  ApiEndpoint endpoint = ApiEndpoint::Completions;
  /// One per prompt (chat: exactly one), each generating `choices` = max(n, best_of)
  /// completions; every field validated (lengths included: prompt + choices × max_tokens
  /// fits the context and the KV cache).
  std::vector<CompletionParams> prompts;
  /// Completions: each prompt's text for echo — the string sent, or its ids decoded
  /// (special tokens kept). Chat: empty.
  std::vector<std::string> prompt_texts;
  int32_t n = 1;        ///< choices returned per prompt
  int32_t best_of = 1;  ///< ≥ n; > n: the n of best_of with the highest cumulative logprob (never streamed)
  bool echo = false;    ///< completions: the prompt's text (and with logprobs its entries) comes first
  /// Chat with echo: the last message's content when it is the assistant's (vLLM's
  /// echo), put before the generated content; "" otherwise.
  std::string echo_prefix;
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage: a final chunk with usage, empty choices
  bool want_logprobs = false;  ///< completions: logprobs given (even 0); chat: logprobs true
  int32_t top_logprobs = 0;    ///< alternatives per token (completions: logprobs; chat: top_logprobs)
  bool return_tokens_as_token_ids = false;  ///< tokens shown as "token_id:ID" (vLLM)
  bool skip_special_tokens = true;          ///< as every prompt's params (text offsets follow it)
  /// The worst-case bytes of every prompt's activation reads together (0: no reads).
  int64_t activation_bytes = 0;
  /// Chat: what the response makes of tool calls (tool_fields.h); Mode::None: plain content.
  ToolPlan tool_plan;
};

}  // namespace olmo2
