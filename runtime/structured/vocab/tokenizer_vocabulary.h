// The constraint engine's Vocabulary from the project's tokenizer (docs/architecture.md
// §8, "Structured outputs"). In olmo2_structured_vocab, so that olmo2_structured itself
// does not link the tokenizer.
#pragma once

#include <memory>
#include <vector>

#include "runtime/structured/constraint.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2::structured {

/// The Vocabulary of a model with `model_vocab_size` logits rows (≥ the tokenizer's
/// vocab_size(); the rows past it are padding) over `tokenizer`: each id's raw bytes;
/// excluded are the padding rows and the tokenizer's special tokens (EOS among them is
/// allowed by its own rule: exactly where the output is complete). `eos`: the model's
/// stop ids. Throws InputError when model_vocab_size < tokenizer.vocab_size() or an EOS
/// id is outside [0, model_vocab_size).
std::shared_ptr<const Vocabulary> vocabulary_from_tokenizer(const Tokenizer& tokenizer, int64_t model_vocab_size,
                                                            const std::vector<int32_t>& eos);

}  // namespace olmo2::structured
