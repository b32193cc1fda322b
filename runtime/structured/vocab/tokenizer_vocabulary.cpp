// The constraint engine's Vocabulary from the project's tokenizer (docs/architecture.md
// §8, "Structured outputs").
#include "runtime/structured/vocab/tokenizer_vocabulary.h"

#include <algorithm>

namespace olmo2::structured {

std::shared_ptr<const Vocabulary> vocabulary_from_tokenizer(const Tokenizer& tokenizer, int64_t model_vocab_size,
                                                            const std::vector<int64_t>& eos) {
  if (model_vocab_size < 1) OLMO2_THROW(InputError, "vocabulary: a model of ", model_vocab_size, " vocabulary rows");
  std::vector<int32_t> stop;
  for (const int64_t e : eos) {
    if (e >= 0 && e < model_vocab_size) stop.push_back(static_cast<int32_t>(e));
  }
  std::sort(stop.begin(), stop.end());
  stop.erase(std::unique(stop.begin(), stop.end()), stop.end());
  const int64_t known = std::min(model_vocab_size, tokenizer.vocab_size());
  std::vector<std::string> bytes(static_cast<size_t>(model_vocab_size));
  std::vector<int32_t> excluded;
  for (int64_t id = 0; id < model_vocab_size; ++id) {
    const auto i = static_cast<int32_t>(id);
    if (std::binary_search(stop.begin(), stop.end(), i)) continue;  // EOS: allowed exactly where complete
    if (id >= known || tokenizer.is_special(i)) {
      excluded.push_back(i);
      continue;
    }
    bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(i);
    if (bytes[static_cast<size_t>(id)].empty()) excluded.push_back(i);
  }
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(excluded), std::move(stop));
}

}  // namespace olmo2::structured
