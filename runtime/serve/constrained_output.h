// One choice's output under a structured-output constraint, as the serving engine on
// rank 0 follows it (docs/architecture.md §8, "Structured outputs"): the mask of the ids
// allowed next, which crosses ranks in the step plan, and the tokens the choice takes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/structured/constraint.h"

namespace olmo2 {

/// The mask of the next token of one constrained output, or why there is none.
struct NextMask {
  /// ⌈vocab_size / 64⌉ words (SelectionRequest::allowed); null when nothing may come next.
  std::shared_ptr<const std::vector<uint64_t>> allowed;
  /// The output cannot be completed within `remaining` tokens, so the mask is the
  /// grammar's without the length rule: the output stays a valid prefix and ends at
  /// max_tokens ("length"), as OpenAI's truncated outputs.
  bool truncating = false;
  /// With allowed null: why, the HTTP status (400: the request's own constraint or
  /// fields; 500: an internal error), and the request field it names ("" : none).
  std::string error;
  int status = 500;
  std::string param;
};

/// One choice's progress through its constraint. Copyable.
class ConstrainedOutput {
 public:
  /// `param`: the request field that asked for the constraint (named by its 400s).
  ConstrainedOutput(std::shared_ptr<const structured::Grammar> grammar,
                    std::shared_ptr<const structured::Vocabulary> vocabulary, std::string param = "");

  /// The ids allowed next with `remaining` ≥ 1 tokens left (max_tokens − generated):
  /// Matcher::fill_mask's, with `banned` (ascending; the min_tokens ban of EOS and
  /// stop_token_ids) cleared. When the length rule leaves nothing, the mask without it
  /// (truncating). Null (with the reason) when even that leaves nothing: min_tokens
  /// cannot be met (the output is complete and only EOS may follow; param "min_tokens"),
  /// or a grammar with no way on (an internal error); a matcher that throws (a grammar
  /// past its bounds) is reported the same way (a 400), never thrown.
  NextMask next(int64_t remaining, std::span<const int32_t> banned) const;
  /// Advances over the chosen token. False (nothing changes) for a token the mask did
  /// not allow, or when the matcher throws: the caller ends the choice with an error.
  bool accept(int32_t id);
  /// Nothing but EOS may follow: the output is complete and the choice can end ("stop")
  /// without spending a token on EOS.
  bool closed() const { return matcher_.closed(); }
  bool complete() const { return matcher_.complete(); }

 private:
  NextMask mask(int64_t remaining, std::span<const int32_t> banned) const;
  structured::Matcher matcher_;
  int64_t words_;
  std::string param_;
};

}  // namespace olmo2
