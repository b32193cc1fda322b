#include "runtime/serve/api/chat_request.h"

#include "runtime/serve/api/api_error.h"
#include "runtime/serve/api/json_fields.h"
#include "runtime/serve/api/sampling_fields.h"
#include "runtime/serve/api/structured_fields.h"
#include "runtime/serve/api/trace_fields.h"

namespace olmo2 {

using nlohmann::json;
using ordered = nlohmann::ordered_json;

namespace {

std::string content_text(const json* content, const std::string& where) {
  const auto bad = [&](const std::string& param, const std::string& message) { throw ApiError(400, param, message); };
  if (!content) bad(where, where + " is required (a string or a list of text parts)");
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) bad(where, where + " must be a string or a list of text parts, got " + brief(*content));
  std::string text;
  for (size_t k = 0; k < content->size(); ++k) {
    const json& part = (*content)[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    if (!part.is_object()) bad(at, at + " must be an object {\"type\": \"text\", \"text\": …}, got " + brief(part));
    Fields pf(part, at);
    const json* type = pf.get("type");
    if (!type || *type != "text") {
      pf.fail("type", at + ".type must be \"text\" (images, audio and files are not supported), got " +
                          (type ? brief(*type) : std::string("nothing")));
    }
    const json* t = pf.get("text");
    if (!t || !t->is_string()) pf.fail("text", at + ".text must be a string");
    pf.refuse_unread();
    if (k) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

}  // namespace

namespace {

// An assistant message's tool_calls[j], as the template gets it: arguments parsed.
ordered check_tool_call(const json& call, const std::string& at) {
  if (!call.is_object()) throw ApiError(400, at, at + " must be an object {id, type, function}, got " + brief(call));
  Fields cf(call, at);
  const json* id = cf.get("id");
  if (!id || !id->is_string()) cf.fail("id", at + ".id must be a string");
  const json* type = cf.get("type");
  if (type && *type != "function") cf.fail("type", at + ".type must be \"function\", got " + brief(*type));
  const json* fn = cf.get("function");
  if (!fn || !fn->is_object()) cf.fail("function", at + ".function must be an object {name, arguments}");
  cf.refuse_unread();
  Fields ff(*fn, at + ".function");
  const json* name = ff.get("name");
  if (!name || !name->is_string()) ff.fail("name", at + ".function.name must be a string");
  const json* arguments = ff.get("arguments");
  if (!arguments || !arguments->is_string()) ff.fail("arguments", at + ".function.arguments must be a string (a JSON object's text)");
  ff.refuse_unread();
  // vLLM hands templates the arguments as a dict (they iterate them); key order kept.
  ordered args;
  try {
    args = ordered::parse(arguments->get<std::string>());
  } catch (const std::exception&) {
    ff.fail("arguments", at + ".function.arguments is not valid JSON: " + brief(*arguments));
  }
  if (!args.is_object()) ff.fail("arguments", at + ".function.arguments must be a JSON object, got " + brief(*arguments));
  return {{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", std::move(args)}}}};
}

}  // namespace

ordered check_messages(const json* messages) {
  if (!messages) throw ApiError(400, "messages", "messages is required (a list of {role, content} objects)");
  if (!messages->is_array() || messages->empty()) {
    throw ApiError(400, "messages", "messages must be a non-empty list of {role, content} objects, got " +
                                        (messages->is_array() ? std::string("an empty list") : brief(*messages)));
  }
  ordered out = ordered::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw ApiError(400, at, at + " must be an object {role, content}, got " + brief(m));
    Fields mf(m, at);
    const json* role = mf.get("role");
    if (!role || !role->is_string() ||
        (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool")) {
      mf.fail("role", at + ".role must be \"system\", \"user\", \"assistant\" or \"tool\", got " +
                          (role ? brief(*role) : std::string("nothing")));
    }
    ordered msg = {{"role", *role}};
    if (*role == "assistant") {
      const json* calls = mf.get("tool_calls");
      if (calls && !calls->is_array()) mf.fail("tool_calls", at + ".tool_calls must be a list, got " + brief(*calls));
      const bool has_calls = calls && !calls->empty();
      // Content may be null with tool calls (OpenAI); vLLM renders it as "".
      const json* content = mf.get("content");
      msg["content"] = (!content && has_calls) ? std::string() : content_text(content, at + ".content");
      if (has_calls) {
        ordered list = ordered::array();
        for (size_t j = 0; j < calls->size(); ++j) {
          list.push_back(check_tool_call((*calls)[j], at + ".tool_calls[" + std::to_string(j) + "]"));
        }
        msg["tool_calls"] = std::move(list);
      }
    } else {
      msg["content"] = content_text(mf.get("content"), at + ".content");
    }
    if (*role == "tool") {
      const json* id = mf.get("tool_call_id");
      if (!id || !id->is_string()) mf.fail("tool_call_id", at + ".tool_call_id must be a string (the call it answers)");
      msg["tool_call_id"] = *id;
      const json* name = mf.get("name");
      if (name && !name->is_string()) mf.fail("name", at + ".name must be a string");
      if (name) msg["name"] = *name;
    }
    mf.refuse_unread();
    out.push_back(std::move(msg));
  }
  return out;
}

ApiRequest parse_chat(const std::string& text, const ServedModel& served, const Tokenizer& tokenizer,
                      const ChatRenderer& render, uint64_t fallback_seed, const ChatToolSupport& tool_support) {
  const json body = parse_body(text);
  Fields f(body);
  ApiRequest r;
  r.endpoint = ApiEndpoint::Chat;
  check_model_field(f, served);
  const ordered messages = check_messages(f.get("messages"));
  // The tools in the client's key order, for the template and the schemas.
  const ordered ordered_tools = body.contains("tools") ? ordered::parse(text).value("tools", ordered()) : ordered();
  const ToolFields tools = read_tool_fields(f, ordered_tools, tool_support);
  r.tool_plan = tools.plan;
  const bool add_generation_prompt = f.boolean("add_generation_prompt", true);
  r.n = static_cast<int32_t>(f.integer("n", 1, 1, std::max<int64_t>(served.max_choices, 1)));
  r.best_of = r.n;
  read_stream_fields(f, r);
  r.echo = f.boolean("echo", false);
  const int64_t max_tokens = f.integer("max_tokens", -1, 1, INT64_MAX);
  const int64_t max_completion_tokens = f.integer("max_completion_tokens", -1, 1, INT64_MAX);
  if (max_tokens >= 0 && max_completion_tokens >= 0 && max_tokens != max_completion_tokens) {
    f.fail("max_completion_tokens", "max_completion_tokens " + std::to_string(max_completion_tokens) +
                                        " and its alias max_tokens " + std::to_string(max_tokens) + " differ");
  }
  r.want_logprobs = f.boolean("logprobs", false);
  r.top_logprobs = static_cast<int32_t>(f.integer("top_logprobs", 0, 0, 20));
  if (f.get("top_logprobs") && !r.want_logprobs) {
    f.fail("top_logprobs", "top_logprobs needs \"logprobs\": true");
  }
  r.return_tokens_as_token_ids = f.boolean("return_tokens_as_token_ids", false);
  CompletionParams p;
  read_generation_fields(f, served, fallback_seed, p);
  const std::shared_ptr<const trace::TraceSpec> trace = read_trace_fields(f, served, r.n, r.best_of);
  read_structured_fields(f, text, served, p);
  read_unimplemented_fields(f);
  f.refuse_unread();
  if (!render) throw ApiError(400, "messages", "this server has no chat template (olmo2 serve --chat-template FILE)");
  std::string prompt;
  try {
    prompt = render(messages, add_generation_prompt, tools.tools);
  } catch (const std::exception& e) {
    throw ApiError(400, "messages", std::string("the chat template cannot render these messages: ") + e.what());
  }
  if (r.echo && messages.back()["role"] == "assistant") r.echo_prefix = messages.back()["content"].get<std::string>();
  p.prompt = tokenizer.encode(prompt);
  if (!tools.schema.empty()) {
    if (p.grammar) {
      f.fail("tool_choice", "tool_choice " + std::string(tools.plan.mode == ToolPlan::Mode::Named ? "naming a function"
                            : "\"required\"") + " constrains the output already: drop response_format / guided_*");
    }
    if (p.ignore_eos) f.fail("ignore_eos", "ignore_eos cannot be combined with tool_choice required or a named function");
    if (!p.stop.empty()) {
      f.fail("stop", "stop strings cannot be combined with tool_choice required or a named function: a stop would cut "
                     "the call short");
    }
    p.grammar = compile_tool_schema(tools.schema, served.json_options);
    p.grammar_param = "tool_choice";
  }
  p.stream = r.stream;
  p.want_logprobs = r.want_logprobs;
  p.logprobs = r.top_logprobs;
  p.choices = r.n;
  r.skip_special_tokens = p.skip_special_tokens;
  const std::string max_param = max_completion_tokens >= 0 ? "max_completion_tokens" : "max_tokens";
  p.max_tokens = max_completion_tokens >= 0 ? max_completion_tokens : max_tokens;
  if (p.max_tokens < 0) {  // the room left, or less: generation_config.json's max_new_tokens
    p.max_tokens = std::max<int64_t>(max_tokens_room(p, served), 1);
    if (served.defaults.max_new_tokens) p.max_tokens = std::min(p.max_tokens, *served.defaults.max_new_tokens);
  }
  check_lengths(p, served, PromptLabel{"messages", "the rendered prompt", true}, max_param);
  int64_t trace_bytes = 0;
  p.trace = trace_for_prompt(trace, p, served, "the rendered prompt", trace_bytes);
  r.prompts.push_back(std::move(p));
  r.activation_bytes = trace_bytes;
  return r;
}

}  // namespace olmo2
