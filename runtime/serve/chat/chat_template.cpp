// ChatTemplate (chat_template.h): loading from a model directory, message normalization
// and rendering. What transformers 5 does around the template, mirrored here:
// PreTrainedTokenizerBase.from_pretrained (chat_template.jinja before
// tokenizer_config.json's field; special_tokens_map), apply_chat_template
// (_normalize_chat_messages drops None fields) and render_jinja_template
// (_alias_reasoning_fields; render(messages, tools, documents, add_generation_prompt,
// **special_tokens, **kwargs)).
#include "runtime/serve/chat/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "runtime/serve/chat/template_eval.h"
#include "runtime/serve/chat/template_lexer.h"
#include "runtime/serve/chat/template_parser.h"

namespace olmo2 {

struct ChatTemplate::Compiled {
  std::string source;      // as given
  std::string normalized;  // as lexed: positions in errors refer to it
  chat::Body body;
};

ChatTemplate ChatTemplate::parse(const std::string& source) {
  auto c = std::make_shared<Compiled>();
  c->source = source;
  c->normalized = chat::normalize_template_source(source);
  c->body = chat::parse_template(c->normalized);
  ChatTemplate t;
  t.compiled_ = std::move(c);
  return t;
}

const std::string& ChatTemplate::source() const { return compiled_->source; }

bool ChatTemplate::reads_variable(const std::string& name) const {
  const std::vector<chat::Token> tokens = chat::lex_template(compiled_->normalized);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].type != chat::TokenType::Name || tokens[i].text != name) continue;
    if (i > 0 && tokens[i - 1].type == chat::TokenType::Op && tokens[i - 1].text == ".") continue;
    return true;
  }
  return false;
}

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) OLMO2_THROW(InputError, "cannot read ", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The message as the template sees it: text parts joined, null fields dropped, reasoning aliased.
template <typename Json>
chat::Value normalize_message(const Json& m, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) OLMO2_THROW(InputError, where, " must be an object, got ", m.type_name());
  if (!m.contains("role") || !m["role"].is_string()) OLMO2_THROW(InputError, where, ".role must be a string");
  chat::Dict d;
  for (const auto& [key, value] : m.items()) {
    if (value.is_null()) continue;
    if (key != "content" || value.is_string()) {
      d.entries.emplace_back(key, chat::Value::from_json(value));
      continue;
    }
    if (!value.is_array()) OLMO2_THROW(InputError, where, ".content must be a string or a list of text parts, got ", value.type_name());
    std::string text;
    for (size_t j = 0; j < value.size(); ++j) {
      const Json& part = value[j];
      const std::string pw = where + ".content[" + std::to_string(j) + "]";
      if (!part.is_object() || !part.contains("type")) OLMO2_THROW(InputError, pw, " must be an object with a type");
      if (part["type"] != "text")
        OLMO2_THROW(InputError, pw, ": unsupported content part type ", part["type"].dump(), " (only \"text\")");
      if (!part.contains("text") || !part["text"].is_string()) OLMO2_THROW(InputError, pw, ".text must be a string");
      text += part["text"].template get<std::string>();
    }
    d.entries.emplace_back(key, chat::Value::string(std::move(text)));
  }
  for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
    const chat::Value* reasoning = d.find(field);
    if (!reasoning) continue;
    chat::Dict aliased;
    aliased.set("thinking", *reasoning);
    for (const auto& [k, v] : d.entries) aliased.set(k, v);
    aliased.set("reasoning_content", *reasoning);
    return chat::Value::dict(std::move(aliased));
  }
  return chat::Value::dict(std::move(d));
}

}  // namespace

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  const fs::path jinja_path = fs::path(dir) / "chat_template.jinja";
  nlohmann::json config = nlohmann::json::object();
  if (fs::exists(config_path)) {
    try {
      config = nlohmann::json::parse(read_file(config_path));
    } catch (const nlohmann::json::exception& e) {
      OLMO2_THROW(InputError, config_path.string(), ": not valid JSON: ", e.what());
    }
    if (!config.is_object()) OLMO2_THROW(InputError, config_path.string(), ": not a JSON object");
  }
  std::optional<std::string> source;
  if (fs::exists(jinja_path)) {
    source = read_file(jinja_path);
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    const nlohmann::json& field = config["chat_template"];
    if (field.is_string()) {
      source = field.get<std::string>();
    } else if (field.is_array()) {
      for (const auto& entry : field)
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string())
          source = entry["template"].get<std::string>();
      if (!source) OLMO2_THROW(InputError, config_path.string(), ": chat_template list has no template named \"default\"");
    } else {
      OLMO2_THROW(InputError, config_path.string(), ": chat_template must be a string or a list, got ", field.type_name());
    }
  }
  if (!source) return std::nullopt;
  ChatTemplate t;
  try {
    t = parse(*source);
  } catch (const InputError& e) {
    OLMO2_THROW(InputError, (fs::exists(jinja_path) ? jinja_path : config_path).string(), ": ", e.what());
  }
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(name) || config[name].is_null()) continue;
    const nlohmann::json& tok = config[name];
    if (tok.is_string()) {
      t.special_tokens_[name] = tok.get<std::string>();
    } else if (tok.is_object() && tok.contains("content") && tok["content"].is_string()) {
      t.special_tokens_[name] = tok["content"].get<std::string>();
    } else {
      OLMO2_THROW(InputError, config_path.string(), ": ", name, " must be a string or {\"content\": string}, got ", tok.dump());
    }
  }
  return t;
}

namespace {

template <typename Json>
std::string render_messages(const chat::Body& body, const std::string& normalized,
                            const std::map<std::string, std::string>& special_tokens, const Json& messages,
                            bool add_generation_prompt, const Json& extra) {
  if (!messages.is_array()) OLMO2_THROW(InputError, "messages must be an array, got ", messages.type_name());
  if (messages.empty()) OLMO2_THROW(InputError, "messages must not be empty");
  if (!extra.is_null() && !extra.is_object()) OLMO2_THROW(InputError, "chat template variables must be a JSON object");
  chat::List list;
  for (size_t i = 0; i < messages.size(); ++i) list.push_back(normalize_message(messages[i], i));
  chat::Dict vars;
  for (const auto& [name, text] : special_tokens) vars.set(name, chat::Value::string(text));
  vars.set("tools", chat::Value::none());
  vars.set("documents", chat::Value::none());
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) {
      if (key == "messages" || key == "add_generation_prompt")
        OLMO2_THROW(InputError, "chat template variable '", key, "' cannot be set by the request");
      vars.set(key, chat::Value::from_json(value));
    }
  }
  vars.set("messages", chat::Value::list(std::move(list)));
  vars.set("add_generation_prompt", chat::Value::boolean(add_generation_prompt));
  return chat::render_body(body, normalized, vars);
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra) const {
  return render_messages(compiled_->body, compiled_->normalized, special_tokens_, messages, add_generation_prompt, extra);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  return render_messages(compiled_->body, compiled_->normalized, special_tokens_, messages, add_generation_prompt, extra);
}

}  // namespace olmo2
