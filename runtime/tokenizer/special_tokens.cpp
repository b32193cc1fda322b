#include "runtime/tokenizer/special_tokens.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace olmo2 {

namespace {

using nlohmann::json;

/// tokenizer_config.json's `field` (null/absent: none; a string; or {"content": string}).
std::optional<TokenRole> role_from_config(const Tokenizer& tok, const json& config, const std::string& path,
                                          const char* field) {
  const auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::nullopt;
  std::string text;
  if (it->is_string()) {
    text = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    text = (*it)["content"].get<std::string>();
  } else {
    OLMO2_THROW(InputError, path, ": ", field, " must be null, a string or an object with a string \"content\", got ",
                it->dump(-1, ' ', false, json::error_handler_t::replace));
  }
  const std::optional<int32_t> id = tok.token_to_id(text);
  if (!id) {
    OLMO2_THROW(InputError, path, ": ", field, " ", json(text).dump(-1, ' ', false, json::error_handler_t::replace),
                " is no token of the tokenizer");
  }
  return TokenRole{*id, text, "tokenizer_config.json " + std::string(field)};
}

/// The first of `names` that is an added token marked special.
std::optional<TokenRole> role_by_name(const Tokenizer& tok, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const std::optional<int32_t> id = tok.token_to_id(name);
    if (id && tok.is_special(*id)) return TokenRole{*id, name, "the added token " + std::string(name)};
  }
  return std::nullopt;
}

std::string role_text(const TokenRole& r) { return r.text + " (id " + std::to_string(r.id) + ")"; }

}  // namespace

TokenizerRoles tokenizer_roles(const Tokenizer& tok, const std::string& tokenizer_config_path) {
  TokenizerRoles roles;
  if (!tokenizer_config_path.empty() && std::filesystem::is_regular_file(tokenizer_config_path)) {
    std::ifstream in(tokenizer_config_path);
    json config;
    try {
      config = json::parse(in);
    } catch (const json::parse_error& e) {
      OLMO2_THROW(InputError, tokenizer_config_path, " is not valid JSON: ", e.what());
    }
    if (!config.is_object()) OLMO2_THROW(InputError, tokenizer_config_path, " is not a JSON object");
    roles.eos = role_from_config(tok, config, tokenizer_config_path, "eos_token");
    roles.pad = role_from_config(tok, config, tokenizer_config_path, "pad_token");
    roles.bos = role_from_config(tok, config, tokenizer_config_path, "bos_token");
    return roles;
  }
  roles.eos = role_by_name(tok, {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"});
  roles.pad = role_by_name(tok, {"<|pad|>", "<pad>", "[PAD]"});
  roles.bos = role_by_name(tok, {"<|begin_of_text|>", "<s>", "<bos>"});
  return roles;
}

std::string describe_token(const Tokenizer& tok, int64_t id) {
  if (id < 0 || id >= tok.vocab_size()) return "id past the tokenizer";
  const std::string& bytes = tok.token_bytes(static_cast<int32_t>(id));
  if (tok.is_added(static_cast<int32_t>(id))) return bytes;
  return json(bytes).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<std::string> special_token_mismatches(const DeclaredSpecialIds& d, const Tokenizer& tok,
                                                  const TokenizerRoles& roles) {
  std::vector<std::string> out;
  const std::string eos_text = roles.eos ? "its end-of-text token is " + role_text(*roles.eos)
                                         : "it has no end-of-text token";
  // Each id must be an added token; returns false (and says so) when it is not.
  auto added = [&](const char* field, int64_t id) {
    const std::string head = d.file + " " + field + " " + std::to_string(id);
    if (id < 0 || id >= tok.vocab_size()) {
      out.push_back(head + " is past the tokenizer's " + std::to_string(tok.vocab_size()) + " ids (" + eos_text + ")");
      return false;
    }
    if (!tok.is_added(static_cast<int32_t>(id))) {
      out.push_back(head + " is " + describe_token(tok, id) + ", not a special token of the tokenizer (" + eos_text +
                    ")");
      return false;
    }
    return true;
  };
  bool eos_ok = true;  // every eos id an added token
  for (int64_t id : d.eos) eos_ok = added("eos_token_id", id) && eos_ok;
  if (eos_ok && d.eos_must_include_tokenizer_eos && roles.eos && !d.eos.empty() &&
      std::find(d.eos.begin(), d.eos.end(), roles.eos->id) == d.eos.end()) {
    std::string ids;
    for (int64_t id : d.eos) ids += (ids.empty() ? "" : ", ") + std::to_string(id) + " is " + describe_token(tok, id);
    out.push_back(d.file + " eos_token_id " + ids + ", not the tokenizer's end-of-text token " +
                  role_text(*roles.eos));
  }
  auto one = [&](const char* field, const std::optional<int64_t>& id, const std::optional<TokenRole>& role,
                 const char* role_name) {
    if (!id || !added(field, *id) || !role || *id == role->id) return;
    out.push_back(d.file + " " + field + " " + std::to_string(*id) + " is " + describe_token(tok, *id) +
                  ", not the tokenizer's " + role_name + " token " + role_text(*role));
  };
  one("pad_token_id", d.pad, roles.pad, "padding");
  one("bos_token_id", d.bos, roles.bos, "beginning-of-text");
  return out;
}

}  // namespace olmo2
