// Prompt lookup (n-gram) proposals for speculative decoding (docs/architecture.md §8).
#pragma once

#include "runtime/serve/speculative/proposer.h"

namespace olmo2 {

/// The continuation of the latest earlier occurrence of `tokens`' last `n` tokens in
/// `tokens` itself (the prompt and the output so far): the up to `max` tokens that
/// followed it. Empty when the sequence is shorter than n + 1 tokens or the n-gram does not
/// occur before its end. Source: prompt lookup decoding (Saxena 2023; vLLM's
/// `ngram` speculative method with prompt_lookup_min = max = n). O(len · n).
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int32_t n, int32_t max);

/// ngram_lookup for every slot; no state. Throws InputError for n < 1.
class NgramProposer : public Proposer {
 public:
  explicit NgramProposer(int32_t n);
  std::vector<std::vector<int32_t>> propose(std::span<const DraftSlot> slots) override;
  std::string describe() const override;

 private:
  int32_t n_;
};

}  // namespace olmo2
