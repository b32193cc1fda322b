// tokenize.json, written by `olmo2 tokenize` beside the .npy token files it makes: which
// EOS ends every document and which tokenizer file made the ids, so that adding to the
// directory with another EOS, or training a model whose config has another, is refused
// (docs/architecture.md §7 "Token data and its EOS").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace olmo2 {

/// The file's name inside a token directory.
constexpr char kTokenizeManifest[] = "tokenize.json";

/// What tokenize.json records.
struct TokenizeManifest {
  int64_t eos_id = -1;           ///< "eos_id": appended after every document
  std::string eos_token;         ///< "eos_token": that token's text, e.g. "<|endoftext|>"
  std::string tokenizer;         ///< "tokenizer": the tokenizer.json path as given to `olmo2 tokenize`
  std::string tokenizer_sha256;  ///< "tokenizer_sha256": 64 lowercase hex digits
};

/// Reads DIR/tokenize.json; nullopt when the directory has none (token files made by
/// hand or by an older `olmo2 tokenize`). Throws InputError naming the file for one that
/// is not a JSON object or whose "eos_id" is not a non-negative integer; the other
/// fields read as "" when absent or not strings.
std::optional<TokenizeManifest> read_tokenize_manifest(const std::string& dir);

/// Writes DIR/tokenize.json (the directory must exist) atomically: into
/// tokenize.json.tmp, then renamed over it. Throws InputError naming the file when it
/// cannot be written.
void write_tokenize_manifest(const std::string& dir, const TokenizeManifest& manifest);

}  // namespace olmo2
