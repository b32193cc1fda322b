// A model's chat template, rendered as transformers'
// tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=…) does
// (docs/architecture.md §8, chat templates). A small interpreter of the Jinja2 subset
// that Hugging Face chat templates use: lexer (template_lexer.h), parser
// (template_parser.h), evaluator (template_eval.h) and built-ins (template_builtins.h).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace olmo2 {

class ChatTemplate {
 public:
  /// Parses `source`; throws InputError naming the construct and position it cannot
  /// handle (the server refuses at start with this message): an unsupported tag
  /// (include, import, extends, block, call, filter, with, …), an unknown filter or
  /// test, a syntax error. No special tokens are set (render's `extra` may give them).
  static ChatTemplate parse(const std::string& source);

  /// Reads the chat template of a model directory as transformers loads it:
  /// `chat_template.jinja` when present, else tokenizer_config.json's `chat_template` (a
  /// string, or the list-of-{name, template} form: the one named "default"); and the
  /// named special tokens of tokenizer_config.json (bos_token, eos_token, unk_token,
  /// sep_token, pad_token, cls_token, mask_token), each a string or a {"content": …}
  /// object. std::nullopt when there is no template (no file, or the field absent or
  /// null). Throws InputError naming the file for malformed JSON, a template list without
  /// "default", a token of another type, or a template that does not parse.
  static std::optional<ChatTemplate> from_model_dir(const std::string& dir);

  /// Renders. `messages` is a JSON array of {role, content, …}: content a string or a
  /// list of {"type": "text", "text": …} parts, concatenated without separator; a null
  /// field is dropped and reasoning_content / thinking / reasoning are aliased to each
  /// other, as transformers does before rendering. The template sees messages,
  /// add_generation_prompt, the special tokens, tools and documents (None unless given),
  /// and every key of `extra` (a JSON object or null; its keys override the special
  /// tokens). raise_exception(msg) in the template throws InputError whose what() is
  /// msg (a 400 for the client). Throws InputError naming the message index for a
  /// malformed message or content part, for no messages (transformers refuses an
  /// empty conversation too), for `extra` naming messages or
  /// add_generation_prompt, and with the line and column for any rendering failure.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& extra = {}) const;
  /// The same, keeping the key order of the request's objects: nlohmann::json sorts keys,
  /// so a template that prints a dict (tool-call arguments | tojson, say) gets them in
  /// sorted order from the overload above but in the client's order — as transformers,
  /// given the request's dicts, prints them — from this one. Parse request bodies as
  /// ordered_json to render byte for byte what transformers renders.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = {}) const;

  /// The template text.
  const std::string& source() const;
  /// Whether the template reads the variable `name` anywhere: a name token `name` in a
  /// tag that is not an attribute (`x.name`) — text and string literals do not count.
  /// The server refuses tools for a template that never reads `tools`
  /// (docs/architecture.md §8, "Tool calls").
  bool reads_variable(const std::string& name) const;
  /// The special tokens read by from_model_dir (name → text); empty after parse().
  const std::map<std::string, std::string>& special_tokens() const { return special_tokens_; }

 private:
  ChatTemplate() = default;
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
  std::map<std::string, std::string> special_tokens_;
};

}  // namespace olmo2
