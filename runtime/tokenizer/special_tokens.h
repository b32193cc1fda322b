// The tokenizer's own end-of-text, padding and beginning-of-text tokens, and the check of
// a model directory's special ids (config.json, generation_config.json) against them
// (docs/architecture.md §8, "Stop ids and sampling defaults").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// One role's token as the tokenizer defines it.
struct TokenRole {
  int32_t id = -1;
  std::string text;    ///< the token's content, e.g. "<|endoftext|>"
  std::string source;  ///< where the role came from: "tokenizer_config.json eos_token" or "the added token <|endoftext|>"
};

/// What the tokenizer calls its end-of-text (EOS), padding and beginning-of-text tokens.
struct TokenizerRoles {
  std::optional<TokenRole> eos, pad, bos;
};

/// The roles of `tokenizer`. When `tokenizer_config_path` names a file (transformers'
/// tokenizer_config.json), its "eos_token", "pad_token" and "bos_token" decide (a string,
/// or an object with a string "content", as transformers writes AddedToken; null or
/// absent: no such role), each looked up with Tokenizer::token_to_id. Without that file
/// (a missing path is not an error) the roles are the first added token marked special
/// among well-known names — EOS: <|endoftext|>, <|end_of_text|>, </s>, <eos>; padding:
/// <|pad|>, <pad>, [PAD]; BOS: <|begin_of_text|>, <s>, <bos> — so the dolma2 tokenizer.json
/// alone gives EOS 100257 and padding 100277, no BOS. Throws InputError naming the file
/// for a tokenizer_config.json that is not a JSON object, or one of those three fields
/// that is neither null, a string nor an object with a string "content", or names text
/// that is no token of the tokenizer.
TokenizerRoles tokenizer_roles(const Tokenizer& tokenizer, const std::string& tokenizer_config_path);

/// The special ids one file of a model directory declares.
struct DeclaredSpecialIds {
  std::string file;               ///< "config.json" or "generation_config.json", as messages name it
  std::vector<int64_t> eos;       ///< eos_token_id (an id or a list)
  std::optional<int64_t> pad;     ///< pad_token_id
  std::optional<int64_t> bos;     ///< bos_token_id
  /// config.json's: its eos ids must include the tokenizer's EOS. generation_config.json's
  /// may list other added tokens (an instruct model's end-of-turn token) without it.
  bool eos_must_include_tokenizer_eos = true;
};

/// The mismatches of `declared` with `tokenizer`, one message each (empty: none):
/// - an id past the tokenizer's ids, or one that is no added token of the tokenizer
///   (special or not): `config.json eos_token_id 0 is "!", not a special token of the
///   tokenizer (its end-of-text token is <|endoftext|>, id 100257)`;
/// - config.json's eos ids that do not include the tokenizer's EOS (when it has one):
///   `config.json eos_token_id 100277 is <|pad|>, not the tokenizer's end-of-text token
///   <|endoftext|> (id 100257)`;
/// - a pad_token_id or bos_token_id other than the tokenizer's padding or BOS token (when
///   it has one), named alike.
/// Every message names the id, what the tokenizer calls it (an added token's content, else
/// its text JSON-quoted) and the tokenizer's own token of that role. Never throws for ids.
std::vector<std::string> special_token_mismatches(const DeclaredSpecialIds& declared, const Tokenizer& tokenizer,
                                                  const TokenizerRoles& roles);

/// How a message names token `id` of `tokenizer`: an added token's content as is, any
/// other token's text JSON-quoted (invalid UTF-8 replaced), "id past the tokenizer" when
/// id ≥ tokenizer.vocab_size().
std::string describe_token(const Tokenizer& tokenizer, int64_t id);

}  // namespace olmo2
