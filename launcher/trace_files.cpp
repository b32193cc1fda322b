#include "launcher/trace_files.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/generation/request_rules.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

namespace {
/// The token ids of one line's object `j`; `where` is "FILE line N".
std::vector<int32_t> prompt_of(const nlohmann::json& j, const std::string& where, const std::string& tokenizer_path,
                               std::optional<Tokenizer>& tokenizer, const ModelConfig& c) {
  if (!j.is_object()) OLMO2_THROW(InputError, where, ": expected a JSON object, got ", j.dump());
  for (const auto& [key, value] : j.items()) {  // a misspelt key is refused, as the API refuses it
    if (key != "prompt" && key != "prompt_ids") {
      OLMO2_THROW(InputError, where, ": unknown key \"", key, "\" (known: prompt, prompt_ids)");
    }
  }
  const bool text = j.contains("prompt"), ids = j.contains("prompt_ids");
  if (text == ids) {
    OLMO2_THROW(InputError, where, ": give exactly one of \"prompt\" (text) and \"prompt_ids\" (token ids)");
  }
  std::vector<int32_t> out;
  if (text) {
    const nlohmann::json& p = j["prompt"];
    if (!p.is_string()) OLMO2_THROW(InputError, where, ": \"prompt\" must be a string, got ", p.dump());
    if (p.get_ref<const std::string&>().empty()) OLMO2_THROW(InputError, where, ": \"prompt\" is empty");
    if (!tokenizer) {
      if (!std::filesystem::is_regular_file(tokenizer_path)) {
        OLMO2_THROW(InputError, where, ": \"prompt\" needs a tokenizer: no file ", tokenizer_path,
                    " (give --tokenizer FILE or use \"prompt_ids\")");
      }
      tokenizer.emplace(Tokenizer::from_file(tokenizer_path));
    }
    out = tokenizer->encode(p.get_ref<const std::string&>());
    if (out.empty()) OLMO2_THROW(InputError, where, ": \"prompt\" encodes to no tokens");
    // A tokenizer larger than the model's vocabulary.
    throw_if_broken(prompt_rule(out, c.vocab_size, PromptNames{"prompt", where + ": \"prompt\"", true, ""}));
  } else {
    const nlohmann::json& p = j["prompt_ids"];
    if (!p.is_array() || p.empty()) {
      OLMO2_THROW(InputError, where, ": \"prompt_ids\" must be a non-empty array of token ids, got ", p.dump());
    }
    for (size_t i = 0; i < p.size(); ++i) {
      if (!p[i].is_number_integer()) {
        OLMO2_THROW(InputError, where, ": prompt_ids[", i, "] = ", p[i].dump(), " is not a token id");
      }
      throw_if_broken(token_id_rule("prompt_ids", where + ": prompt_ids[" + std::to_string(i) + "]",
                                    p[i].get<int64_t>(), c.vocab_size));
      out.push_back(static_cast<int32_t>(p[i].get<int64_t>()));
    }
  }
  // Scored only (nothing generated): as long as the context at most.
  throw_if_broken(context_rule(static_cast<int64_t>(out.size()), 0, c.max_position_embeddings,
                               PromptNames{"prompt", where + ": the prompt", false, ""}));
  return out;
}
}  // namespace

std::vector<std::vector<int32_t>> read_trace_prompts(const std::string& path, const std::string& tokenizer_path,
                                                     const ModelConfig& config) {
  std::ifstream in(path);
  if (!std::filesystem::is_regular_file(path) || !in) {
    OLMO2_THROW(InputError, "--prompts: cannot open ", path, " (not a readable file)");
  }
  std::vector<std::vector<int32_t>> prompts;
  std::optional<Tokenizer> tokenizer;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "--prompts " + path + " line " + std::to_string(number);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      OLMO2_THROW(InputError, where, ": not JSON (", e.what(), ")");
    }
    prompts.push_back(prompt_of(j, where, tokenizer_path, tokenizer, config));
  }
  if (in.bad()) OLMO2_THROW(InputError, "--prompts: cannot read ", path);
  if (prompts.empty()) OLMO2_THROW(InputError, "--prompts ", path, " holds no prompt");
  return prompts;
}

std::ofstream open_output_file(const std::string& path, const std::string& option) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) OLMO2_THROW(InputError, option, ": cannot write ", path);
  return out;
}

}  // namespace olmo2
