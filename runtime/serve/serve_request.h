// One completion request inside the server: its validated parameters, and the channel
// through which the engine thread hands its output to the HTTP thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/generation/logits_adjustments.h"
#include "runtime/generation/token_selection.h"
#include "runtime/trace/trace_spec.h"

namespace olmo2 {

namespace structured {
class Grammar;  // runtime/structured/constraint.h
}

/// A validated request for one prompt (runtime/serve/api/completion_request.h and chat_request.h parse it): what
/// the engine generates for it, `choices` completions of the same prompt.
struct CompletionParams {
  std::vector<int32_t> prompt;     ///< token ids, non-empty
  int64_t max_tokens = 16;         ///< ≥ 1, or 0 with echo (score the prompt only)
  SamplingParams sampling;         ///< seed always set (drawn by the server when absent)
  LogitsAdjustments adjust;        ///< logit_bias and the penalties (vLLM's definitions)
  int64_t min_tokens = 0;          ///< EOS and stop_token_ids are banned before this many tokens
  std::vector<int32_t> stop_token_ids;  ///< generation also stops on these ids (finish "stop")
  int32_t logprobs = 0;            ///< top alternatives per token, 0: none
  bool want_logprobs = false;      ///< "logprobs" given (even 0: the chosen token's own)
  bool prompt_logprobs = false;    ///< echo with logprobs: score the prompt's tokens too
  std::vector<std::string> stop;   ///< stop strings, each non-empty
  bool include_stop_str_in_output = false;  ///< a matched stop string ends the text (vLLM)
  bool skip_special_tokens = true; ///< drop special tokens from the text (vLLM's default)
  bool ignore_eos = false;         ///< keep generating past EOS (benchmarks)
  bool stream = false;
  /// Completions of this prompt the engine generates (max(n, best_of)): the prompt is
  /// prefilled once and its KV blocks shared; choice c samples with seed
  /// choice_seed(sampling.seed, c).
  int32_t choices = 1;
  /// What the request reads and changes in the forward (docs/architecture.md §13):
  /// checked against the model, prompt_len = prompt.size(); null when the request has
  /// neither `activations` nor `interventions` (or both are empty). Reads imply
  /// choices = 1.
  std::shared_ptr<const trace::TraceSpec> trace;
  /// Structured outputs (docs/architecture.md §8, "Structured outputs"): every choice's
  /// output is a sentence of this grammar, enforced token by token (a mask over the
  /// logits before sampling; EOS only where the output is complete). Null: unconstrained.
  /// Set by response_format / guided_* / structured_outputs and by chat's tool_choice
  /// (required or a named function).
  std::shared_ptr<const structured::Grammar> grammar;
  /// With grammar: the request field that asked for it ("response_format", "guided_regex",
  /// "tool_choice", …), named by a 400 when the constraint cannot be followed.
  std::string grammar_param;
};

/// The seed of choice `c` of a request seeded `seed`: `seed` itself for choice 0 (so n = 1
/// is unchanged), a splitmix64 mix of (seed, c) otherwise — distinct streams per choice.
uint64_t choice_seed(uint64_t seed, int32_t c);

/// Output released to the client at once: text (whole UTF-8, nothing of a stop string)
/// and the tokens generated since the previous chunk.
struct CompletionChunk {
  int32_t choice = 0;                 ///< which of the request's choices (0 … choices−1)
  std::string text;
  std::vector<SelectedToken> tokens;  ///< with log-probabilities when asked
  /// With prompt_logprobs, on the first chunk of choice 0 only: one entry per prompt token
  /// (id = the prompt token; logprob and top from the logits of the position before it;
  /// entry 0 has no logprob: the API reports null).
  std::vector<SelectedToken> prompt_tokens;
  double cumulative_logprob = 0;      ///< Σ logprob of the choice's tokens so far (best_of)
  std::string finish_reason;          ///< set on the choice's last chunk: "stop" or "length"
  std::string error;                  ///< set on the last chunk when the server gave up on it
  int error_status = 0;               ///< with error: the HTTP status it maps to (400, 500, 503)
  std::string error_param;            ///< with error: the request field it names ("" : none)
  /// With speculative decoding, on the choice's last chunk: the drafted tokens verified
  /// for this choice, and how many of them were accepted (docs/architecture.md §8).
  int64_t spec_proposed = 0, spec_accepted = 0;
  /// With trace reads, on the choice's last chunk (the one with finish_reason): the
  /// response's "activations" object (trace::ActivationStore::result). Null otherwise.
  nlohmann::json activations;
};

/// Wakes a thread that waits on several things at once — the chunks of every request of
/// one HTTP response, and its client hanging up — without polling: each event bumps a
/// counter and notifies. The waiter reads epoch(), looks at everything, and when nothing
/// was there waits for the epoch to move past what it read (so an event between the look
/// and the wait is not lost). Thread-safe.
class Wakeup {
 public:
  uint64_t epoch() const;
  void notify();
  /// Blocks until epoch() ≠ `seen`.
  void wait(uint64_t seen);

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t epoch_ = 0;
};

/// A request's channel between the engine thread (producer) and its HTTP thread.
class ServeRequest {
 public:
  using Clock = std::chrono::steady_clock;
  ServeRequest(int64_t id, CompletionParams params) : id_(id), params_(std::move(params)), arrival_(Clock::now()) {}

  int64_t id() const { return id_; }
  const CompletionParams& params() const { return params_; }
  Clock::time_point arrival() const { return arrival_; }

  /// Engine side: hand out a chunk. Each choice's last chunk has finish_reason set; a chunk
  /// with error set is the request's last (every choice ends with it).
  void push(CompletionChunk chunk);
  /// HTTP side: waits up to `timeout` for the next chunk (0: only what is there).
  /// nullopt on timeout.
  std::optional<CompletionChunk> next(std::chrono::milliseconds timeout);
  /// HTTP side: every later push also notifies `wakeup` (one waiter for the chunks of
  /// several requests; chunks pushed before are already queued, so the waiter's first
  /// look finds them).
  void bind(std::shared_ptr<Wakeup> wakeup);

  /// Either side: the client is gone (or the server is stopping). The engine drops the
  /// sequence and frees its blocks at its next step boundary.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  int64_t id_;
  CompletionParams params_;
  Clock::time_point arrival_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<CompletionChunk> chunks_;
  std::shared_ptr<Wakeup> wakeup_;  // under mutex_
  std::atomic<bool> cancelled_{false};
};

}  // namespace olmo2
