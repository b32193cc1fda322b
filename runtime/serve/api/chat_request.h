// Parsing a /v1/chat/completions body (docs/architecture.md §8, API).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/serve/api/api_request.h"
#include "runtime/serve/api/served_model.h"
#include "runtime/serve/api/tool_fields.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// Renders checked messages (check_messages) to the prompt text, the generation prompt
/// (the assistant's turn) appended when asked, the template's `tools` variable set to
/// `tools` (the request's list as sent; null: None). The server passes
/// ChatTemplate::render (runtime/serve/chat/); any exception it throws is a 400 naming
/// messages. The text holds the template's special tokens (BOS, turn markers) as text:
/// the tokenizer matches added tokens whole. Ordered JSON: a template that prints a dict
/// (tools | tojson) prints it in the client's key order, as transformers does.
using ChatRenderer = std::function<std::string(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                               const nlohmann::ordered_json& tools)>;

/// Checks `messages` (param "messages"): a non-empty list of objects {role, content},
/// content a string or a list of {"type": "text", "text": string} parts (joined with
/// "\n", as vLLM's string content format). Roles: system, user; assistant, whose content
/// may be null or absent when it has tool_calls — a list of {"id": string, "type":
/// "function", "function": {"name": string, "arguments": a JSON object's text}}; tool,
/// with tool_call_id (string) and optionally name. Any other role, part type or field
/// is refused naming messages[i] and the field. Returns them as the template gets them
/// (vLLM's and transformers' form): {role, content: string (null content: ""),
/// tool_calls: [{id, type, function: {name, arguments: the parsed object, key order
/// kept}}], tool_call_id, name}. Throws ApiError 400.
nlohmann::ordered_json check_messages(const nlohmann::json* messages);

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
/// chat template) refuses every request (param messages). tools, tool_choice and
/// parallel_tool_calls as read_tool_fields reads them with `tool_support` (the
/// request's ApiRequest::tool_plan; a named function or "required" constrains the
/// output to the schema read_tool_fields gives). Throws ApiError (400) naming the field.
ApiRequest parse_chat(const std::string& body, const ServedModel& served, const Tokenizer& tokenizer,
                      const ChatRenderer& render, uint64_t fallback_seed, const ChatToolSupport& tool_support = {});

}  // namespace olmo2
