// The serving engine: rank 0 schedules and broadcasts each step's plan; every rank of
// the TP × PP job executes it in lockstep (docs/architecture.md §8).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "monitoring/serve_metrics.h"
#include "parallel/communicator.h"
#include "runtime/model/model.h"
#include "runtime/model/kv_cache.h"
#include "runtime/serve/intervention_salts.h"
#include "runtime/serve/scheduler.h"
#include "runtime/serve/serve_request.h"
#include "runtime/serve/speculative/proposer.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

namespace structured {
class Vocabulary;  // runtime/structured/constraint.h
}

/// The server is full or stopping: HTTP 503.
class ServiceUnavailable : public Error {
 public:
  using Error::Error;
};

struct EngineOptions {
  SchedulerOptions scheduler;  ///< num_blocks, block_size, limits, micro_batches
  int64_t max_waiting = 256;   ///< requests waiting beyond the running batch; more get 503
  double shutdown_grace_s = 30;  ///< after a stop request, in-flight requests get this long
  /// Speculative decoding (docs/architecture.md §8), rank 0: what proposes drafted tokens,
  /// scheduler.num_speculative_tokens (1 … 16) at most per sequence and step. Null: none
  /// (num_speculative_tokens is then ignored).
  std::shared_ptr<Proposer> proposer;
  /// The KV cache's pools, f32 or bf16 (--kv-cache-dtype); nullopt: the model's
  /// precision's (kv_cache_dtype, docs/architecture.md §3.2).
  std::optional<DType> kv_dtype;
};


/// Where this rank sits in the serving job.
struct EngineRanks {
  parallel::Communicator* world = nullptr;  ///< every rank (null: one process); plans go out from rank 0
  ParallelContext groups;                   ///< TP and PP groups of this rank
  int results_root = 0;  ///< world rank that sends the chosen tokens to rank 0 (last stage, tp 0)
};

/// Runs the model for the scheduler's plans. On rank 0 it also owns the scheduler, the
/// requests and their detokenization (StreamDecoder, then StopStringMatcher, so no part
/// of a stop string is ever released unless include_stop_str_in_output). Generation
/// stops at EOS (unless ignore_eos) and at stop_token_ids, whose text is dropped unless
/// include_stop_str_in_output (vLLM); before min_tokens tokens both are banned (−∞) and
/// no stop string ends the text. With prompt_logprobs the prompt's log-probabilities come
/// from the prefill's own logits (every chunk, every layout) into the first chunk's
/// prompt_tokens; max_tokens 0 prefills and scores the prompt only ("length"). With a
/// proposer (speculative decoding), decoding sequences of requests that read no
/// activations get drafted tokens, which the target verifies in the step's one forward;
/// each step then emits 1 … K + 1 tokens per such sequence, bit for bit those plain
/// decoding would emit one per step (speculative/verification.h). A request with a grammar
/// (structured outputs, docs/architecture.md §8) gets, each step, the mask of the ids
/// its constraint allows next (EOS only where its output is complete, the length rule
/// of max_tokens − generated), ends "stop" as soon as its output is complete and nothing
/// but EOS may follow, and gets no drafted tokens. Every rank calls run(); it returns once rank 0
/// has stopped (request_stop(), then in-flight requests finish or, past the grace
/// period, are cancelled) and every rank has left the loop.
class ServingEngine {
 public:
  /// `tokenizer` and `metrics` are used on rank 0 only (may be null elsewhere).
  /// Throws InputError for bad options (see Scheduler).
  ServingEngine(const Olmo2Model& model, const Tokenizer* tokenizer, monitoring::ServeMetrics* metrics,
                const EngineOptions& options, const EngineRanks& ranks);
  ~ServingEngine();

  /// Rank 0, any thread: queues a request. Throws InputError with the reason of the
  /// first broken rule of runtime/generation/request_rules.h (the prompt, max_tokens ≥ 0,
  /// min_tokens, sampling, penalties and logit_bias, stop_token_ids, reads with one
  /// choice) — the API (runtime/serve/api/) applies the same rules first, as 400s;
  /// ServiceUnavailable when max_running + max_waiting requests are already in the
  /// server, or after request_stop().
  std::shared_ptr<ServeRequest> submit(CompletionParams params);
  /// Any thread (a signal watcher): stop accepting and wind down; `now`: without the
  /// grace period (requests in flight are cancelled at the next step boundary).
  void request_stop(bool now = false);
  bool stopping() const { return stop_.load(); }

  /// Every rank: the step loop, until shutdown.
  void run();

  /// Positions one sequence can always hold in the KV cache (kv_capacity_tokens: blocks ×
  /// block size with one KV group): no request may need more.
  int64_t cache_capacity_tokens() const;
  /// Whether prefix caching is on: as asked, but off for a model whose every layer is a
  /// sliding-window one (docs/architecture.md §8).
  bool prefix_caching() const;
  const EngineOptions& options() const { return opt_; }

 private:
  int rank() const;
  void run_scheduler();                   // rank 0
  /// Rank 0: what the scheduler's plan leaves to the requests — the logits adjustments,
  /// the min_tokens ban and the constraint's allowed-token mask of each sampled sequence (the output's token counts and the
  /// prompt's ids only for requests with penalties), the prompt positions to score, and
  /// no sampling for requests with max_tokens 0.
  void prepare_plan(StepPlan& plan);
  /// Rank 0: fills the scheduler's lookahead with the proposer's drafted tokens
  /// (PlannedSequence::draft).
  void propose(StepPlan& plan);
  /// Every rank: runs the plan; on rank 0 returns the chosen tokens (the chosen rows in
  /// plan order: PlannedSequence::rows()) and, in `prompt`, each plan sequence's scored
  /// prompt positions.
  std::vector<SelectedToken> execute(const StepPlan& plan, std::vector<std::vector<SelectedToken>>* prompt);
  /// Rank 0: per plan sequence, the tokens it emits (accept_drafts of its rows; empty
  /// when not sampled), from execute's chosen rows.
  std::vector<std::vector<SelectedToken>> emitted_tokens(const StepPlan& plan, const std::vector<SelectedToken>& rows);
  void broadcast_plan(StepPlan& plan);    // rank 0 sends, the others receive
  /// Every rank, after a step with traced sequences: sends this rank's recorded pieces
  /// to rank 0, which adds them to the requests' stores (docs/architecture.md §13).
  void collect_activations(const StepPlan& plan, const std::vector<float>& pieces);
  void deliver(const StepPlan& plan, const std::vector<std::vector<SelectedToken>>& emitted,
               std::vector<std::vector<SelectedToken>>& prompt);
  struct Active;  // rank 0's state of one request
  struct Choice;  // … and of one of its choices
  /// Ends a request: every choice's sequence leaves the scheduler, `chunk` is its last.
  void finish(int64_t request_id, CompletionChunk chunk, const std::string& outcome);
  /// Ends choice `c` of `a` with `chunk` (finish_reason set); the last one ends the request.
  void finish_choice(Active& a, int32_t c, CompletionChunk chunk);
  /// Hands choice `c` of `a` its next generated token `t`: detokenization, stop tokens and
  /// strings, max_tokens, and a chunk for the client. True when that ended the choice (and
  /// maybe the request: `a` may be gone).
  bool take_token(Active& a, int32_t c, const SelectedToken& t, ServeRequest::Clock::time_point now);
  /// Structured outputs: advances choice `c`'s constraint over token `id`. False when it
  /// cannot — the step had no allowed token (prepare_plan's dead end: min_tokens
  /// unreachable, a 400; else a 500) or the matcher refuses the token (a bug: a 500) —
  /// and the request has then ended with that error (`a` is gone).
  bool constrained_token(Active& a, int32_t c, int32_t id);
  /// Moves submitted requests into the scheduler and drops cancelled ones; `close`:
  /// no request is accepted after this one.
  void drain_inbox(bool close = false);

  const Olmo2Model& model_;
  const Tokenizer* tokenizer_;
  monitoring::ServeMetrics* metrics_;
  EngineOptions opt_;
  EngineRanks ranks_;
  /// Every id generation stops at (ModelConfig::stop_token_ids: config.json's eos ids, then
  /// generation_config.json's): EOS for ignore_eos, min_tokens and structured outputs alike.
  std::vector<int64_t> stop_ids_;
  KVCache cache_;
  std::unique_ptr<Scheduler> scheduler_;  // rank 0
  std::map<int64_t, std::unique_ptr<Active>> active_;               // by request id
  std::map<int64_t, std::pair<int64_t, int32_t>> seq_owner_;          // sequence id → (request id, choice)
  int64_t next_seq_ = 1;                                              // scheduler sequence ids (rank 0)
  InterventionSalts salts_;  // rank 0: prefix-cache salts of steered requests
  // Rank 0: the vocabulary constrained outputs are matched over, made at the first one.
  std::shared_ptr<const structured::Vocabulary> vocabulary_;

  std::mutex inbox_mutex_;
  std::condition_variable inbox_cv_;
  std::vector<std::shared_ptr<ServeRequest>> inbox_;
  bool closed_ = false;  // under inbox_mutex_
  std::atomic<int64_t> in_flight_{0};  // submitted and not yet finished requests
  std::atomic<int64_t> next_id_{1};
  std::atomic<bool> stop_{false}, stop_now_{false};
};

}  // namespace olmo2
