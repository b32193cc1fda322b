#include "runtime/serve/speculative/ngram_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace olmo2 {

std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int32_t n, int32_t max) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (n < 1 || max < 1 || len < n + 1) return {};
  const std::span<const int32_t> tail = tokens.subspan(static_cast<size_t>(len - n));
  // Latest start s < len − n whose n tokens equal the tail (the tail itself excluded).
  for (int64_t s = len - n - 1; s >= 0; --s) {
    if (!std::equal(tail.begin(), tail.end(), tokens.begin() + s)) continue;
    const int64_t from = s + n, to = std::min(len, from + max);
    return {tokens.begin() + from, tokens.begin() + to};
  }
  return {};
}

NgramProposer::NgramProposer(int32_t n) : n_(n) {
  if (n < 1) OLMO2_THROW(InputError, "--speculative-ngram must be ≥ 1, got ", n);
}

std::vector<std::vector<int32_t>> NgramProposer::propose(std::span<const DraftSlot> slots) {
  std::vector<std::vector<int32_t>> out;
  out.reserve(slots.size());
  for (const DraftSlot& s : slots) out.push_back(ngram_lookup(s.tokens, n_, s.max));
  return out;
}

std::string NgramProposer::describe() const { return "prompt lookup of " + std::to_string(n_) + "-grams"; }

}  // namespace olmo2
