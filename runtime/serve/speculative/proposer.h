// What proposes drafted tokens for speculative decoding, on rank 0 (docs/architecture.md
// §8, "Speculative decoding"): a draft model (draft_model_proposer.h) or prompt lookup
// (ngram_proposer.h). Proposals only decide how much a step verifies, never the output.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace olmo2 {

/// The most drafted tokens per sequence and step (--num-speculative-tokens).
inline constexpr int32_t kMaxSpeculativeTokens = 16;

/// One decoding sequence that may be given drafted tokens this step.
struct DraftSlot {
  int64_t seq_id = 0;
  std::span<const int32_t> tokens;  ///< its prompt and every token generated so far (the last not yet in the KV cache)
  int32_t max = 0;                  ///< at most this many drafted tokens (≥ 1)
};

/// Proposes the tokens that follow each slot's tokens. Called by the engine thread only.
class Proposer {
 public:
  virtual ~Proposer() = default;
  /// For each slot (same order), 0 … slot.max token ids of the model's vocabulary. Throws
  /// Error only for a failure of the proposer itself (which ends the server like an
  /// engine failure); a proposer short of memory proposes nothing instead.
  virtual std::vector<std::vector<int32_t>> propose(std::span<const DraftSlot> slots) = 0;
  /// Sequence `seq_id` has ended: drop whatever the proposer holds for it.
  virtual void release(int64_t seq_id) { (void)seq_id; }
  /// For the start line: what proposes, e.g. "prompt lookup of 3-grams".
  virtual std::string describe() const = 0;
};

}  // namespace olmo2
