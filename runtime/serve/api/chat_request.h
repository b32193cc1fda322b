// Parsing a /v1/chat/completions body (docs/architecture.md §8, API).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/serve/api/api_request.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// Renders checked messages — a list of {"role": "system"|"user"|"assistant", "content":
/// string} — to the prompt text, the generation prompt (the assistant's turn) appended
/// when asked. The server passes ChatTemplate::render (runtime/serve/chat/); any
/// exception it throws is a 400 naming messages. The text holds the template's special
/// tokens (BOS, turn markers) as text: the tokenizer matches added tokens whole.
using ChatRenderer = std::function<std::string(const nlohmann::json& messages, bool add_generation_prompt)>;

/// Checks `messages` (param "messages"): a non-empty list of objects with role system,
/// user or assistant and content a string or a list of {"type": "text", "text": string}
/// parts (joined with "\n", as vLLM's string content format); any other role, part type
/// or message field (name, tool_calls, …) refused naming messages[i] and the field.
/// Returns them as [{role, content: string}]. Throws ApiError 400.
nlohmann::json check_messages(const nlohmann::json* messages);

/// Parses and validates a /v1/chat/completions body (OpenAI's chat completions with
/// vLLM's extensions). Fields: messages (check_messages, rendered by `render` and
/// encoded by `tokenizer`); max_completion_tokens or its alias max_tokens (both given and
/// different: 400; ≥ 1; default the room left: min(context − prompt, (KV cache −
/// prompt) / n)); n (1 … served.max_choices); logprobs (bool) and top_logprobs (0 … 20,
/// only with logprobs true, as OpenAI); add_generation_prompt (default true, vLLM);
/// echo (vLLM's: when the last message is the assistant's, its content starts the
/// returned content; typically with add_generation_prompt false to continue it);
/// return_tokens_as_token_ids; stream, stream_options; model; the fields of
/// read_generation_fields and read_unimplemented_fields; activations and interventions
/// as /v1/completions reads them (trace_fields.h; activations need n = 1). best_of is
/// not a chat field: refused as unknown, like every unknown field. An empty `render` (no
/// chat template) refuses every request (param messages). Throws ApiError (400) naming
/// the field.
ApiRequest parse_chat(const std::string& body, const ServedModel& served, const Tokenizer& tokenizer,
                      const ChatRenderer& render, uint64_t fallback_seed);

}  // namespace olmo2
