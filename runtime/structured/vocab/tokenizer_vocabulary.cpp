// The constraint engine's Vocabulary from the project's tokenizer (docs/architecture.md
// §8, "Structured outputs").
#include "runtime/structured/vocab/tokenizer_vocabulary.h"

namespace olmo2::structured {

std::shared_ptr<const Vocabulary> vocabulary_from_tokenizer(const Tokenizer& tokenizer, int64_t model_vocab_size,
                                                            const std::vector<int32_t>& eos) {
  const int64_t n = tokenizer.vocab_size();
  if (model_vocab_size < n)
    OLMO2_THROW(InputError, "vocabulary: the model has ", model_vocab_size, " vocabulary rows, fewer than the tokenizer's ", n,
                " tokens");
  std::vector<std::string> bytes(static_cast<size_t>(model_vocab_size));
  std::vector<int32_t> excluded;
  for (int64_t id = 0; id < model_vocab_size; ++id) {
    const auto i = static_cast<int32_t>(id);
    if (id >= n || tokenizer.is_special(i)) {
      excluded.push_back(i);
      continue;
    }
    bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(i);
  }
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(excluded), eos);
}

}  // namespace olmo2::structured
