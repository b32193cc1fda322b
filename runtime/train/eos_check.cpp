#include "runtime/train/eos_check.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "runtime/io/file_sha256.h"
#include "runtime/tokenizer/special_tokens.h"
#include "runtime/tokenizer/tokenize_manifest.h"

namespace olmo2 {

namespace {
/// The directory of a --data file ("." for a bare file name): where its tokenize.json is.
std::string data_directory(const std::string& file) {
  const std::string dir = std::filesystem::path(file).parent_path().string();
  return dir.empty() ? "." : dir;
}

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
    const std::string dir = data_directory(f);
    if (!seen.insert(dir).second) continue;  // the directory's first file speaks for it
    const std::optional<TokenizeManifest> m = read_tokenize_manifest(dir);
    if (!m || std::find(config_eos.begin(), config_eos.end(), m->eos_id) != config_eos.end()) continue;
    out.push_back("--data " + f + ": " + (std::filesystem::path(dir) / kTokenizeManifest).string() +
                  " says its documents end with " + m->eos_token + " (id " + std::to_string(m->eos_id) + "), which " +
                  config_file + " eos_token_id " + id_list(config_eos) + " does not include");
  }
  return out;
}

std::vector<std::string> training_tokenizer_notes(const std::string& tokenizer_path,
                                                  const std::vector<std::string>& data_files) {
  std::vector<std::string> out;
  if (tokenizer_path.empty()) return out;
  std::string sha;  // read once, when a tokenize.json records one
  std::set<std::string> seen;
  for (const std::string& f : data_files) {
    const std::string dir = data_directory(f);
    if (!seen.insert(dir).second) continue;
    const std::optional<TokenizeManifest> m = read_tokenize_manifest(dir);
    if (!m || m->tokenizer_sha256.empty()) continue;
    if (sha.empty()) sha = sha256_file(tokenizer_path);
    if (m->tokenizer_sha256 == sha) continue;
    out.push_back("the token files in " + dir + " were made with the tokenizer " + m->tokenizer + " (sha256 " +
                  m->tokenizer_sha256.substr(0, 12) + "…), not this run's " + tokenizer_path + " (sha256 " +
                  sha.substr(0, 12) + "…): check that both give the same ids");
  }
  return out;
}

}  // namespace olmo2
