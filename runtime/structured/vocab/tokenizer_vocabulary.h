// The constraint engine's Vocabulary from the project's tokenizer (docs/architecture.md
// §8, "Structured outputs"). In olmo2_structured_vocab, so that olmo2_structured itself
// does not link the tokenizer.
#pragma once

#include <memory>
#include <vector>

#include "runtime/structured/constraint.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2::structured {

/// The Vocabulary of a model with `model_vocab_size` logits rows over `tokenizer`: ids
/// 0 … model_vocab_size − 1 with the tokenizer's raw bytes. Never allowed: the
/// tokenizer's special tokens, tokens without bytes, and the rows past the tokenizer
/// (a padded embedding's padding; a model narrower than the tokenizer simply has fewer
/// ids). `eos`: the model's stop ids; those inside the vocabulary are allowed exactly
/// where the output is complete, the others ignored. Builds the token trie (~0.1 s for
/// 100k ids): the serving engine makes it once, at its first constrained request.
/// Throws InputError for model_vocab_size < 1.
std::shared_ptr<const Vocabulary> vocabulary_from_tokenizer(const Tokenizer& tokenizer, int64_t model_vocab_size,
                                                            const std::vector<int64_t>& eos);

}  // namespace olmo2::structured
