// The model's end-of-text token against the run's tokenizer and token data, checked by
// `olmo2 train` before any work: documents are separated by, and generation stops on,
// that token, so all three must name the same (docs/architecture.md §7 "Token data and
// its EOS").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

/// The mismatches, one message each (empty: none), of `config_eos` (the eos_token_id
/// list of `config_file`, named in every message) with
/// (a) the end-of-text token of `tokenizer` (null: no check), read from `tokenizer_path`,
///     its roles from the tokenizer_config.json beside that file (tokenizer_roles,
///     runtime/tokenizer/special_tokens.h): the list must include it, and every id in it
///     must be an added token of the tokenizer (special_token_mismatches);
/// (b) the eos_id of the tokenize.json beside each of `data_files` (each directory
///     once; one without tokenize.json is not checked): the list must include it.
/// Throws InputError for a tokenizer_config.json or tokenize.json that cannot be read.
std::vector<std::string> training_eos_mismatches(const std::vector<int64_t>& config_eos, const std::string& config_file,
                                                 const Tokenizer* tokenizer, const std::string& tokenizer_path,
                                                 const std::vector<std::string>& data_files);

/// Notes, never errors: one for each --data directory whose tokenize.json records a
/// tokenizer_sha256 other than the SHA-256 of `tokenizer_path` ("": none), i.e. ids made
/// by another tokenizer file than the run's (which may still agree: a note, not a refusal).
/// Throws InputError for a tokenizer or tokenize.json that cannot be read.
std::vector<std::string> training_tokenizer_notes(const std::string& tokenizer_path,
                                                  const std::vector<std::string>& data_files);

}  // namespace olmo2
