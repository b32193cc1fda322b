// One serving step's plan: what rank 0's scheduler decided and every rank executes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/generation/token_selection.h"
#include "runtime/model/kv_cache.h"
#include "runtime/trace/trace_spec.h"

namespace olmo2 {

/// One sequence's share of a step.
struct PlannedSequence {
  int64_t seq_id = 0;           ///< the scheduler's id (never reused)
  int32_t micro_batch = 0;      ///< pipeline micro-batch, 0 … micro_batches−1
  int64_t start = 0;            ///< positions already in the KV cache
  std::vector<int32_t> tokens;  ///< new tokens (a prompt chunk, or the last sampled token)
  /// The sequence's whole block table: every KV group's table, of equal lengths, group
  /// after group (KVCache's layout); −1 for a block a sliding group released.
  std::vector<int32_t> blocks;
  bool sample = false;          ///< these tokens end the known text: choose the next token
  SelectionRequest selection;   ///< how (when sample)
  /// Speculative decoding (docs/architecture.md §8): the last `draft` tokens are proposals,
  /// not yet part of the sequence; with sample, each of the last draft + 1 positions is a
  /// verified row (speculative/verification.h). 0: plain decoding.
  int32_t draft = 0;
  /// Rank 0 only (not broadcast): the drafted tokens the scheduler made room for — budget
  /// and KV blocks — after `tokens`; the proposer fills at most this many.
  int32_t lookahead = 0;
  /// Prompt logprobs (echo): positions score_begin … score_end − 1 of `tokens` are scored,
  /// position j against tokens[j + 1] (the chunk's last against next_token), with
  /// prompt_logprobs alternatives each; none when score_end == score_begin. The model
  /// then computes logits for every position of this sequence (ForwardOptions::all_logits).
  int64_t score_begin = 0, score_end = 0;
  int32_t prompt_logprobs = 0;
  int32_t next_token = -1;      ///< the prompt token after this chunk (−1: the chunk ends the prompt)
  /// Named activations (docs/architecture.md §13): what this sequence reads and changes in
  /// the forward (null: neither), and the first position whose reads are recorded
  /// (below it, a pre-emption's recomputation records nothing again; interventions
  /// still apply).
  std::shared_ptr<const trace::TraceSpec> trace;
  int64_t record_from = 0;
  int64_t scored() const { return score_end - score_begin; }
  /// Rows whose token is chosen: 1 + draft when sampled, else 0.
  int64_t rows() const { return sample ? 1 + draft : 0; }
};

/// A step: the block copies to make first, then the sequences to run, split into
/// micro-batches for the pipeline stages; or the order to stop.
struct StepPlan {
  bool shutdown = false;
  int32_t micro_batches = 1;
  /// Every rank applies these to its KV cache (KVCache::copy_blocks, in order) before the
  /// step's forward: copy-on-write of forked sequences' last blocks.
  std::vector<BlockCopy> copies;
  std::vector<PlannedSequence> sequences;
  /// Sequences with sample set, in plan order (the order of the step's results).
  int64_t sampled() const;
  /// Rows whose token is chosen, Σ rows() (each sampled sequence's in plan order).
  int64_t chosen_rows() const;
};

/// Flat i64 encoding of a plan for its broadcast from rank 0 (an i64 collective):
/// shutdown, micro_batches, the copy count, the copies (src, dst), the sequence count,
/// then per sequence seq_id, micro_batch,
/// start, sample, draft; the selection: temperature (the double's bits), top_k, top_p (bits),
/// min_p (bits), seed, draw, logprobs, target, the presence, frequency and repetition
/// penalties (bits), the counts of logit_bias, banned, prompt_ids and output_counts, then
/// those lists (a bias as id and the float's bits, a count as id and count), the
/// allowed-token mask (0: none; 1, the mask's word count, the count of allowed ids and
/// the ids — when fewer ids than words are allowed —; else 2, the word count and the
/// words' bits; docs/architecture.md §8, "Structured outputs"); then
/// score_begin, score_end, prompt_logprobs, next_token; the trace flag (0: no trace, one
/// word; 1: then TraceSpec::encode's words and record_from); the token and block counts,
/// the tokens, the blocks. Every field is an integer or a floating-point number's bits: the
/// plan crosses ranks bit for bit. The lists are only as long as the request needs
/// (the engine fills them only for requests with bias, penalties or a min_tokens ban).
std::vector<int64_t> encode_plan(const StepPlan& plan);
/// Inverse of encode_plan. Throws Error for a truncated or malformed buffer.
StepPlan decode_plan(std::span<const int64_t> data);

/// A step's chosen tokens on their way from the last pipeline stage to rank 0, each
/// field in its own type (sent as an i32 message then an f32 one): for each chosen row
/// (PlannedSequence::rows(), in plan order), 1 + selection.logprobs entries in both buffers: the chosen
/// token (ids: its id; logprobs: its log-probability), then the alternatives, most
/// likely first (ids: the id, or -1 where the token had fewer alternatives; logprobs:
/// the log-probability, 0 there). Then for each sequence with scored prompt positions,
/// in plan order, scored() × (1 + prompt_logprobs) entries laid out alike (the target
/// prompt token and its log-probability, then the alternatives). docs/architecture.md §8.
struct StepResults {
  std::vector<int32_t> ids;      ///< token ids (i32)
  std::vector<float> logprobs;   ///< log-probabilities (f32), same length as ids
};

/// Encodes `tokens`, one per chosen row of `plan` in plan order, and `prompt`
/// (empty, or one list per plan sequence: its scored() prompt positions). Throws Error
/// when there are fewer tokens than chosen rows or a prompt list of another length.
StepResults encode_results(const StepPlan& plan, const std::vector<SelectedToken>& tokens,
                           const std::vector<std::vector<SelectedToken>>& prompt = {});
/// The length of each StepResults buffer for `plan`: Σ over sampled sequences of
/// rows() × (1 + selection.logprobs), plus Σ scored() × (1 + prompt_logprobs).
int64_t results_size(const StepPlan& plan);
/// Inverse of encode_results: the chosen rows' tokens (plan order), and into `prompt` (when not
/// null) one list per plan sequence of its scored positions. Throws Error when either
/// buffer's length is not results_size(plan) (naming both).
std::vector<SelectedToken> decode_results(const StepPlan& plan, std::span<const int32_t> ids,
                                          std::span<const float> logprobs,
                                          std::vector<std::vector<SelectedToken>>* prompt = nullptr);

}  // namespace olmo2
