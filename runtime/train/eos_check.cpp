#include "runtime/train/eos_check.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "runtime/tokenizer/special_tokens.h"
#include "runtime/tokenizer/tokenize_manifest.h"

namespace olmo2 {

namespace {
/// "[100257]", "[100257, 100265]", "[]".
std::string id_list(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
  return "[" + out + "]";
}
}  // namespace

std::vector<std::string> training_eos_mismatches(const std::vector<int64_t>& config_eos, const std::string& config_file,
                                                 const Tokenizer* tokenizer, const std::string& tokenizer_path,
                                                 const std::vector<std::string>& data_files) {
  std::vector<std::string> out;
  if (tokenizer) {
    const Tokenizer& tok = *tokenizer;
    const std::string tokenizer_config =
        (std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json").string();
    const TokenizerRoles roles = tokenizer_roles(tok, tokenizer_config);
    const std::string with_config = std::filesystem::exists(tokenizer_config) ? " with " + tokenizer_config : "";
    const std::string of_tokenizer = " (tokenizer " + tokenizer_path + with_config + ")";
    if (config_eos.empty() && roles.eos) {
      out.push_back(config_file + " has no eos_token_id; the tokenizer's end-of-text token is " + roles.eos->text +
                    " (id " + std::to_string(roles.eos->id) + ")" + of_tokenizer);
    }
    DeclaredSpecialIds declared;
    declared.file = config_file, declared.eos = config_eos;
    for (const std::string& m : special_token_mismatches(declared, tok, roles)) out.push_back(m + of_tokenizer);
  }
  std::set<std::string> seen;
  for (const std::string& f : data_files) {
    std::string dir = std::filesystem::path(f).parent_path().string();
    if (dir.empty()) dir = ".";
    if (!seen.insert(dir).second) continue;
    const std::optional<TokenizeManifest> m = read_tokenize_manifest(dir);
    if (!m || std::find(config_eos.begin(), config_eos.end(), m->eos_id) != config_eos.end()) continue;
    out.push_back("--data " + f + ": " + (std::filesystem::path(dir) / kTokenizeManifest).string() +
                  " says its documents end with " + m->eos_token + " (id " + std::to_string(m->eos_id) + "), which " +
                  config_file + " eos_token_id " + id_list(config_eos) + " does not include");
  }
  return out;
}

}  // namespace olmo2
