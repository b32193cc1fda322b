// Exact speculative decoding: the target's verification of drafted tokens in one pass,
// and which of them it accepts (docs/architecture.md §8, "Speculative decoding").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/generation/token_selection.h"
#include "runtime/serve/serve_plan.h"

namespace olmo2 {

/// The selection requests of the rows a sampled plan entry verifies: `p.draft + 1` rows,
/// row j choosing token number `p.selection.draw + j` of the output from the logits of
/// `p.tokens[size − draft − 1 + j]` — the last token before the drafts (row 0), then each
/// drafted token. Row j asks exactly what plain decoding would ask once the first j drafted
/// tokens had been accepted: draw index `draw + j`, and with penalties the output's counts
/// plus those j tokens (so `output_counts` stays ascending and unique). Everything else
/// (sampling, logit_bias, banned ids, prompt ids, logprobs) is row 0's: the scheduler
/// grants no more drafts than keep every row on the same side of min_tokens
/// (Scheduler::schedule). Throws Error when `p.draft` is negative or exceeds the tokens.
/// Source: plain decoding's per-step request (ServingEngine::prepare_plan); speculative
/// sampling as in Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
/// Decoding", made exact by counter-based draws instead of rejection sampling.
std::vector<SelectionRequest> verification_requests(const PlannedSequence& p);

/// The tokens a verified entry emits, given its rows' choices `rows` (p.draft + 1 of them,
/// in row order): row j's choice while it equals drafted token j + 1 (accepted), then the
/// first row whose choice differs — or the last row, every draft accepted — whose choice
/// is the target's own next token. So 1 … draft + 1 tokens, each with its row's
/// log-probabilities: exactly the tokens plain decoding would have produced one per step.
/// Empty when any row is kNonFiniteToken and p.draft > 0 (the engine redoes the step
/// without drafts, so that a value that is non-finite only at a rejected position never
/// ends a request). Throws Error for a row count other than p.draft + 1.
std::vector<SelectedToken> accept_drafts(const PlannedSequence& p, std::span<const SelectedToken> rows);

}  // namespace olmo2
