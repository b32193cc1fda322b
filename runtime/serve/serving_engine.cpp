#include "runtime/serve/serving_engine.h"

#include "ops/device_runtime.h"
#include "runtime/serve/nonfinite_answer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "runtime/generation/request_rules.h"
#include "runtime/serve/constrained_output.h"
#include "runtime/structured/vocab/tokenizer_vocabulary.h"
#include "runtime/serve/speculative/verification.h"
#include "runtime/serve/stop_strings.h"
#include "runtime/trace/activation_recorder.h"

namespace olmo2 {

namespace {
constexpr int kResultIdsTag = 41, kResultLogprobsTag = 42;  // StepResults' two messages
double seconds_between(ServeRequest::Clock::time_point a, ServeRequest::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

/// Rank 0's state of one choice (one completion) of a request: one scheduler sequence.
struct ServingEngine::Choice {
  int64_t seq_id = 0;
  StreamDecoder decoder;
  StopStringMatcher matcher;
  int64_t generated = 0;
  double cumulative_logprob = 0;  // Σ logprob of its tokens (best_of ranks choices by it)
  int64_t spec_proposed = 0, spec_accepted = 0;  // drafted tokens verified, and accepted
  ServeRequest::Clock::time_point last_token;
  CompletionChunk pending;  // tokens since the last released chunk
  // Structured outputs (docs/architecture.md §8): the constraint's progress, and why the
  // next token cannot be constrained (set by prepare_plan: the choice then ends with it).
  std::optional<ConstrainedOutput> constraint;
  NextMask dead_end;
  Choice(int64_t seq, const Tokenizer& tok, const CompletionParams& params)
      : seq_id(seq), decoder(tok, params.skip_special_tokens), matcher(params.stop, params.include_stop_str_in_output) {}
};

/// Rank 0's state of one request: its choices, what all of them share, and its times
/// for the metrics. Prompt logprobs come from choice 0, which computes the whole prompt.
struct ServingEngine::Active {
  std::shared_ptr<ServeRequest> request;
  std::vector<Choice> choices;
  int64_t unfinished = 0;           // choices still generating
  int64_t generated = 0;            // tokens of every choice
  bool scheduled = false;
  ServeRequest::Clock::time_point first_scheduled, first_token;
  std::vector<int32_t> prompt_ids;  // the prompt's distinct ids, ascending (repetition penalty)
  std::vector<int32_t> banned;      // EOS and stop_token_ids, ascending: banned before min_tokens
  int64_t scored = 0;               // prompt positions whose log-probabilities have arrived
  std::vector<SelectedToken> prompt_tokens;  // their results, in position order
  bool prompt_done = false;         // prompt_tokens handed to choice 0's `pending`
  // Named activations (docs/architecture.md §13): the reads assembled so far, and the
  // first position not yet fed to the model (a recomputation records nothing below it).
  std::unique_ptr<trace::ActivationStore> store;
  int64_t fed_until = 0;
  explicit Active(std::shared_ptr<ServeRequest> r) : request(std::move(r)) {}
};

namespace {
/// `ids` ascending without repeats.
std::vector<int32_t> distinct(std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

bool contains(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }
}  // namespace

ServingEngine::ServingEngine(const Olmo2Model& model, const Tokenizer* tokenizer, monitoring::ServeMetrics* metrics,
                             const EngineOptions& options, const EngineRanks& ranks)
    : model_(model),
      tokenizer_(tokenizer),
      metrics_(metrics),
      opt_(options),
      ranks_(ranks),
      stop_ids_(model.config().stop_token_ids()),
      cache_(model.config(), model.shard(), options.scheduler.num_blocks, options.scheduler.block_size, model.device(),
             kv_cache_dtype(options.kv_dtype, model.precision())) {
  if (opt_.max_waiting < 0) OLMO2_THROW(InputError, "max waiting requests must be ≥ 0, got ", opt_.max_waiting);
  // The model's KV groups decide which blocks the scheduler may release (docs/architecture.md §8).
  opt_.scheduler.group_windows = cache_.layout().windows();
  if (!opt_.proposer) {
    opt_.scheduler.num_speculative_tokens = 0;
  } else if (opt_.scheduler.num_speculative_tokens < 1 || opt_.scheduler.num_speculative_tokens > kMaxSpeculativeTokens) {
    OLMO2_THROW(InputError, "--num-speculative-tokens must be in 1 … ", kMaxSpeculativeTokens, ", got ",
                opt_.scheduler.num_speculative_tokens);
  }
  if (rank() == 0) {
    OLMO2_CHECK(tokenizer_, "rank 0 of the serving engine needs the tokenizer");
    scheduler_ = std::make_unique<Scheduler>(opt_.scheduler);
  }
}

ServingEngine::~ServingEngine() = default;

int64_t ServingEngine::cache_capacity_tokens() const { return kv_capacity_tokens(opt_.scheduler); }

bool ServingEngine::prefix_caching() const {
  return opt_.scheduler.prefix_caching && cache_.layout().window(0) == 0;  // as the Scheduler decides
}

std::shared_ptr<ServeRequest> ServingEngine::submit(CompletionParams params) {
  // The rule book of request fields (runtime/generation/request_rules.h): the API has
  // applied the same rules already, with a 400; here they guard every other caller.
  const int64_t vocab = model_.config().vocab_size;
  const PromptNames names;
  throw_if_broken(prompt_rule(params.prompt, vocab, names));
  throw_if_broken(max_tokens_rule(params.max_tokens, true, names));
  throw_if_broken(min_tokens_rule(params.min_tokens, params.max_tokens, names));
  throw_if_broken(sampling_rules(params.sampling));
  throw_if_broken(adjustment_rules(params.adjust, vocab));
  for (size_t i = 0; i < params.stop_token_ids.size(); ++i) {
    throw_if_broken(token_id_rule("stop_token_ids", "stop_token_ids[" + std::to_string(i) + "]",
                                  params.stop_token_ids[i], vocab));
  }
  throw_if_broken(reads_choices_rule(params.trace && !params.trace->reads.empty(), params.choices));
  if (params.grammar && params.ignore_eos) {
    OLMO2_THROW(InputError, "ignore_eos cannot be combined with a structured-output constraint: the output ends where "
                            "the constraint's sentence is complete");
  }
  if (stop_.load()) OLMO2_THROW(ServiceUnavailable, "the server is shutting down");
  if (in_flight_.fetch_add(1) >= opt_.max_waiting + opt_.scheduler.max_running) {
    in_flight_.fetch_sub(1);
    OLMO2_THROW(ServiceUnavailable, "the server is at capacity: ", opt_.scheduler.max_running, " requests run and ",
                opt_.max_waiting, " wait (--max-running-requests, --max-waiting-requests); retry later");
  }
  auto r = std::make_shared<ServeRequest>(next_id_.fetch_add(1), std::move(params));
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    if (closed_) {  // the engine has answered its last request: nobody would answer this one
      in_flight_.fetch_sub(1);
      OLMO2_THROW(ServiceUnavailable, "the server is shutting down");
    }
    inbox_.push_back(r);
  }
  inbox_cv_.notify_all();
  return r;
}

void ServingEngine::request_stop(bool now) {
  if (now) stop_now_.store(true);
  stop_.store(true);
  inbox_cv_.notify_all();
}

int ServingEngine::rank() const { return ranks_.world ? ranks_.world->rank() : 0; }

void ServingEngine::run() {
  if (rank() == 0) {
    try {
      run_scheduler();
    } catch (const std::exception& e) {
      // Nothing more will be generated: answer every request, so that no HTTP handler
      // waits forever, then let the error end the process.
      stop_.store(true);
      drain_inbox(true);
      std::vector<int64_t> left;
      for (auto& [id, a] : active_) left.push_back(id);
      for (int64_t id : left) {
        CompletionChunk c;
        c.error = std::string("internal server error: ") + e.what();
        finish(id, std::move(c), "error");
      }
      throw;
    }
    return;
  }
  for (;;) {
    StepPlan plan;
    broadcast_plan(plan);
    if (plan.shutdown) return;
    cache_.copy_blocks(plan.copies);  // copy-on-write of forks, before the step's forward
    execute(plan, nullptr);
  }
}

void ServingEngine::broadcast_plan(StepPlan& plan) {
  if (!ranks_.world || ranks_.world->size() == 1) return;
  parallel::Communicator& world = *ranks_.world;
  std::vector<int64_t> data;
  if (world.rank() == 0) data = encode_plan(plan);
  int64_t n = static_cast<int64_t>(data.size());
  // An idle server waits for its next request as long as it takes.
  const double timeout = world.timeout_s();
  if (world.rank() != 0) world.set_timeout(0);
  world.broadcast(std::span<int64_t>(&n, 1), 0);
  world.set_timeout(timeout);
  data.resize(static_cast<size_t>(n));
  world.broadcast(std::span<int64_t>(data), 0);
  if (world.rank() != 0) plan = decode_plan(data);
}

std::vector<SelectedToken> ServingEngine::execute(const StepPlan& plan,
                                                  std::vector<std::vector<SelectedToken>>* prompt) {
  const ShardSpec& shard = model_.shard();
  ForwardOptions fo;
  fo.last_logits_only = true;
  fo.batch_invariant = true;
  fo.vocab_parallel_logits = true;
  fo.check_finite = true;  // a NaN or infinity ends its request with an error, never garbage tokens
  // Chosen tokens and scored prompt positions by plan position: micro-batches run in
  // their order, results go back in plan order.
  std::vector<std::vector<SelectedToken>> chosen(plan.sequences.size());
  std::vector<std::vector<SelectedToken>> scored(plan.sequences.size());
  // Named activations (docs/architecture.md §13): a tap only for micro-batches with a
  // traced sequence; its pieces go to rank 0 after the step.
  const bool traced = std::any_of(plan.sequences.begin(), plan.sequences.end(),
                                  [](const PlannedSequence& s) { return s.trace != nullptr; });
  std::vector<float> pieces;
  for (int32_t mb = 0; mb < plan.micro_batches; ++mb) {
    TokenBatch batch;
    std::vector<size_t> seqs;  // plan positions of this micro-batch
    std::vector<trace::TracedSequence> tapped;
    fo.all_logits.clear();
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const PlannedSequence& s = plan.sequences[i];
      if (s.micro_batch != mb) continue;
      seqs.push_back(i);
      batch.tokens.emplace_back(s.tokens);
      batch.start.push_back(s.start);
      batch.block_tables.emplace_back(s.blocks);
      // prompt logprobs, or a read of the logits: every position's logits
      fo.all_logits.push_back(s.scored() > 0 || s.draft > 0 ||
                              (s.trace && s.trace->touches(TapSite::LmHeadOutput, -1)));
      tapped.push_back({s.trace.get(), static_cast<int32_t>(i), s.record_from});
    }
    if (seqs.empty()) continue;
    std::optional<trace::ActivationRecorder> recorder;
    if (traced) {
      recorder.emplace(model_.config(), shard, ranks_.groups.tp ? ranks_.groups.tp->rank() : 0, std::move(tapped));
      if (recorder->active()) fo.tap = &*recorder;
    }
    const ForwardResult out = model_.forward(batch, &cache_, fo, ranks_.groups);
    fo.tap = nullptr;
    if (recorder) pieces.insert(pieces.end(), recorder->pieces().begin(), recorder->pieces().end());
    if (!shard.final_norm) continue;
    // One select_tokens call for the micro-batch: the sampled rows, then each scored
    // prompt position as a target row (its logits' row q, against the next prompt token).
    std::vector<TensorView> rows;
    std::vector<SelectionRequest> requests;
    std::vector<std::pair<size_t, bool>> owner;  // plan position, whether a prompt position
    for (size_t j = 0; j < seqs.size(); ++j) {
      const PlannedSequence& s = plan.sequences[seqs[j]];
      const TensorView logits = out.logits[j].view();
      if (s.sample) {  // the last row, or with drafted tokens the last draft + 1 (verification)
        const int64_t last = logits.size(0) - 1;
        std::vector<SelectionRequest> verified = verification_requests(s);
        for (size_t r = 0; r < verified.size(); ++r) {
          const int64_t q = last - static_cast<int64_t>(verified.size() - 1 - r);
          rows.push_back(logits.rows(q, q + 1));
          requests.push_back(std::move(verified[r]));
          owner.emplace_back(seqs[j], false);
        }
      }
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      for (int64_t q = s.score_begin; q < s.score_end; ++q) {
        SelectionRequest r;
        r.target = q + 1 < n ? s.tokens[static_cast<size_t>(q + 1)] : s.next_token;
        r.logprobs = s.prompt_logprobs;
        OLMO2_CHECK(r.target >= 0, "prompt position ", q, " of sequence ", s.seq_id, " has no next token");
        rows.push_back(logits.rows(q, q + 1));
        requests.push_back(std::move(r));
        owner.emplace_back(seqs[j], true);
      }
    }
    if (rows.empty()) continue;
    std::vector<SelectedToken> got = select_tokens(rows, shard, requests, ranks_.groups.tp);
    for (size_t j = 0; j < got.size(); ++j) {
      const auto [i, is_prompt] = owner[j];
      if (is_prompt) {
        scored[i].push_back(std::move(got[j]));
      } else {
        chosen[i].push_back(std::move(got[j]));
      }
    }
    for (size_t j = 0; j < seqs.size(); ++j) {  // the results say which sequences went non-finite
      if (j >= out.nonfinite.size() || !out.nonfinite[j]) continue;
      const size_t i = seqs[j];
      for (SelectedToken& s : chosen[i]) s.id = kNonFiniteToken;
      for (SelectedToken& s : scored[i]) s.id = kNonFiniteToken;
    }
  }
  if (traced) collect_activations(plan, pieces);
  if (rank() != ranks_.results_root && rank() != 0) return {};
  std::vector<SelectedToken> ordered;
  if (rank() == ranks_.results_root) {
    for (std::vector<SelectedToken>& rows : chosen) {
      for (SelectedToken& t : rows) ordered.push_back(std::move(t));
    }
  }
  if (ranks_.results_root == 0 || results_size(plan) == 0) {
    if (prompt) *prompt = std::move(scored);
    return ordered;
  }
  parallel::Communicator& world = *ranks_.world;
  if (rank() == ranks_.results_root) {
    const StepResults r = encode_results(plan, ordered, scored);
    world.send(std::span<const int32_t>(r.ids), 0, kResultIdsTag);
    world.send(std::span<const float>(r.logprobs), 0, kResultLogprobsTag);
    return {};
  }
  StepResults r;
  r.ids.resize(static_cast<size_t>(results_size(plan)));
  r.logprobs.resize(r.ids.size());
  world.recv(std::span<int32_t>(r.ids), ranks_.results_root, kResultIdsTag);
  world.recv(std::span<float>(r.logprobs), ranks_.results_root, kResultLogprobsTag);
  return decode_results(plan, r.ids, r.logprobs, prompt);
}

void ServingEngine::collect_activations(const StepPlan& plan, const std::vector<float>& pieces) {
  const std::vector<float> all = ranks_.world ? trace::gather_pieces(*ranks_.world, pieces) : pieces;
  if (rank() != 0) return;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const PlannedSequence& p = plan.sequences[i];
    if (!p.trace) continue;
    const auto owner = seq_owner_.find(p.seq_id);
    if (owner == seq_owner_.end()) continue;
    Active& a = *active_.at(owner->second.first);
    if (a.store) a.store->add(all, static_cast<int32_t>(i));
    a.fed_until = std::max(a.fed_until, p.start + static_cast<int64_t>(p.tokens.size()));
  }
}

void ServingEngine::drain_inbox(bool close) {
  std::vector<std::shared_ptr<ServeRequest>> fresh;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    fresh.swap(inbox_);
    if (close) closed_ = true;
  }
  for (auto& r : fresh) {
    const CompletionParams& p = r->params();
    auto a = std::make_unique<Active>(r);
    const int32_t n = std::max(p.choices, 1);
    a->choices.reserve(static_cast<size_t>(n));
    std::vector<SchedSequence> seqs(static_cast<size_t>(n));
    for (int32_t c = 0; c < n; ++c) {
      SchedSequence& s = seqs[static_cast<size_t>(c)];
      s.id = next_seq_++;
      s.selection.params = p.sampling;
      s.selection.params.seed = choice_seed(p.sampling.seed, c);
      // At least one alternative is computed so that the chosen token's own log-probability
      // is (it is among them or next to them); the API reports `logprobs` of them. Several
      // choices need it too: best_of ranks them by their cumulative log-probability.
      s.selection.logprobs = p.want_logprobs ? std::max(p.logprobs, 1) : (n > 1 ? 1 : 0);
      // Speculative decoding for every choice, but not with activation reads (rejected
      // positions would be recorded: docs/architecture.md §8).
      // Nor for constrained outputs: each drafted position would need its own mask.
      s.speculate = opt_.proposer && !(p.trace && !p.trace->reads.empty()) && !p.grammar;
      s.max_tokens = p.max_tokens;
      s.min_tokens = p.min_tokens;
      a->choices.emplace_back(s.id, *tokenizer_, p);
      if (p.grammar) {
        if (!vocabulary_) {
          vocabulary_ = structured::vocabulary_from_tokenizer(*tokenizer_, model_.config().vocab_size, stop_ids_);
        }
        a->choices.back().constraint.emplace(p.grammar, vocabulary_, p.grammar_param);
      }
      seq_owner_[s.id] = {r->id(), c};
    }
    seqs[0].tokens = p.prompt;
    seqs[0].prompt_len = static_cast<int64_t>(p.prompt.size());
    // Prompt logprobs need the logits of every prompt position, and reads of prompt
    // positions their activations: computed, not found cached. Steered sequences' blocks
    // are cached under their interventions' salt (docs/architecture.md §13).
    seqs[0].read_cache = !p.prompt_logprobs && !(p.trace && p.trace->reads_prompt());
    if (p.trace) {
      const uint64_t salt = salts_.salt_of(*p.trace);
      for (SchedSequence& s : seqs) s.cache_salt = salt;
      if (!p.trace->reads.empty()) a->store = std::make_unique<trace::ActivationStore>(p.trace, model_.config());
    }
    a->unfinished = n;
    SchedSequence first = std::move(seqs[0]);
    seqs.erase(seqs.begin());
    // The other choices fork from the first: its prompt is prefilled once.
    scheduler_->add(std::move(first), std::move(seqs));
    if (p.adjust.repetition_penalty != 1) a->prompt_ids = distinct(p.prompt);
    if (p.min_tokens > 0) {  // vLLM bans EOS (even with ignore_eos) and the stop token ids
      std::vector<int32_t> ban(p.stop_token_ids);
      for (int64_t e : stop_ids_) ban.push_back(static_cast<int32_t>(e));
      a->banned = distinct(std::move(ban));
    }
    active_[r->id()] = std::move(a);
  }
  // Cancelled requests (client gone): drop them and free their blocks.
  std::vector<int64_t> gone;
  for (auto& [id, a] : active_) {
    if (a->request->cancelled()) gone.push_back(id);
  }
  for (int64_t id : gone) {
    CompletionChunk c;
    c.error = "cancelled";
    finish(id, std::move(c), "cancelled");
  }
}

void ServingEngine::finish(int64_t request_id, CompletionChunk chunk, const std::string& outcome) {
  const auto it = active_.find(request_id);
  if (it == active_.end()) return;
  Active& a = *it->second;
  in_flight_.fetch_sub(1);
  for (Choice& ch : a.choices) {  // every choice ends with the request
    scheduler_->remove(ch.seq_id);
    seq_owner_.erase(ch.seq_id);
    if (opt_.proposer) opt_.proposer->release(ch.seq_id);
  }
  if (metrics_) {
    metrics_->request_finished(outcome);
    if (outcome == "success") {
      const auto now = ServeRequest::Clock::now();
      const auto arrival = a.request->arrival();
      metrics_->request_served(static_cast<int64_t>(a.request->params().prompt.size()), a.generated,
                               seconds_between(arrival, a.first_scheduled), seconds_between(arrival, a.first_token),
                               seconds_between(arrival, now));
    }
  }
  // The gauges first: a client that scrapes right after its answer sees it gone.
  if (metrics_) {
    metrics_->engine_state(scheduler_->running(), scheduler_->waiting(), scheduler_->kv_usage());
    if (model_.device() == Device::CUDA) {
      const ops::GpuMemory gm = ops::gpu_memory();
      metrics_->gpu_memory(static_cast<double>(gm.in_use_bytes), static_cast<double>(gm.cached_bytes));
    }
  }
  a.request->push(std::move(chunk));
  active_.erase(it);
}

void ServingEngine::finish_choice(Active& a, int32_t c, CompletionChunk chunk) {
  Choice& ch = a.choices[static_cast<size_t>(c)];
  chunk.choice = c;
  chunk.cumulative_logprob = ch.cumulative_logprob;
  chunk.spec_proposed = ch.spec_proposed;
  chunk.spec_accepted = ch.spec_accepted;
  if (a.store && c == 0) chunk.activations = a.store->result();  // the choice's last chunk
  if (--a.unfinished == 0) {  // the request's last chunk: finish() ends it
    finish(a.request->id(), std::move(chunk), "success");
    return;
  }
  scheduler_->remove(ch.seq_id);
  seq_owner_.erase(ch.seq_id);
  if (opt_.proposer) opt_.proposer->release(ch.seq_id);
  a.request->push(std::move(chunk));
}

void ServingEngine::propose(StepPlan& plan) {
  if (!opt_.proposer) return;
  std::vector<DraftSlot> slots;
  std::vector<size_t> where;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const PlannedSequence& p = plan.sequences[i];
    if (p.lookahead < 1) continue;
    const SchedSequence* seq = scheduler_->find(p.seq_id);
    OLMO2_CHECK(seq, "planned sequence ", p.seq_id, " is unknown to the scheduler");
    slots.push_back({p.seq_id, seq->tokens, p.lookahead});
    where.push_back(i);
  }
  if (slots.empty()) return;
  const std::vector<std::vector<int32_t>> drafts = opt_.proposer->propose(slots);
  OLMO2_CHECK(drafts.size() == slots.size(), "the proposer answered ", drafts.size(), " of ", slots.size(), " slots");
  const int64_t vocab = model_.config().vocab_size;
  for (size_t k = 0; k < slots.size(); ++k) {
    PlannedSequence& p = plan.sequences[where[k]];
    const std::vector<int32_t>& d = drafts[k];
    OLMO2_CHECK(static_cast<int32_t>(d.size()) <= p.lookahead, "the proposer drafted ", d.size(), " tokens for room of ",
                p.lookahead);
    for (int32_t id : d) OLMO2_CHECK(id >= 0 && id < vocab, "the proposer drafted token ", id, " outside the vocabulary");
    p.tokens.insert(p.tokens.end(), d.begin(), d.end());
    p.draft = static_cast<int32_t>(d.size());
  }
}

std::vector<std::vector<SelectedToken>> ServingEngine::emitted_tokens(const StepPlan& plan,
                                                                      const std::vector<SelectedToken>& rows) {
  std::vector<std::vector<SelectedToken>> emitted(plan.sequences.size());
  size_t at = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const PlannedSequence& p = plan.sequences[i];
    if (!p.sample) continue;
    OLMO2_CHECK(at + static_cast<size_t>(p.rows()) <= rows.size(), "fewer chosen rows than the plan has");
    emitted[i] = accept_drafts(p, std::span<const SelectedToken>(rows).subspan(at, static_cast<size_t>(p.rows())));
    at += static_cast<size_t>(p.rows());
  }
  return emitted;
}

void ServingEngine::prepare_plan(StepPlan& plan) {
  for (PlannedSequence& p : plan.sequences) {
    const auto [request_id, choice] = seq_owner_.at(p.seq_id);
    Active& a = *active_.at(request_id);
    const CompletionParams& params = a.request->params();
    const int64_t plen = static_cast<int64_t>(params.prompt.size()), n = static_cast<int64_t>(p.tokens.size());
    p.trace = params.trace;  // every rank taps, reads and steers from the plan
    p.record_from = a.fed_until;
    // Prompt positions not scored yet (each once, in order: a recomputed prefix is not
    // scored again), the prompt's last one excluded (it predicts the first new token).
    // Choice 0 computes the whole prompt; the others fork after it.
    if (params.prompt_logprobs && !a.prompt_done && choice == 0) {
      const int64_t begin = std::max(a.scored, p.start), end = std::min(p.start + n, plen - 1);
      if (begin == a.scored && begin < end) {
        p.score_begin = begin - p.start;
        p.score_end = end - p.start;
        p.prompt_logprobs = params.logprobs;
        p.next_token = p.start + n < plen ? params.prompt[static_cast<size_t>(p.start + n)] : -1;
      }
    }
    if (params.max_tokens == 0) p.sample = false;  // scoring only: finished once the prompt is in
    if (!p.sample) continue;
    SelectionRequest& r = p.selection;
    r.adjust = params.adjust;
    if (static_cast<int64_t>(r.draw) < params.min_tokens) r.banned = a.banned;
    Choice& ch = a.choices[static_cast<size_t>(choice)];
    if (ch.constraint) {  // the mask of the ids the constraint allows next (docs/architecture.md §8)
      ch.dead_end = ch.constraint->next(params.max_tokens - ch.generated, r.banned);
      r.allowed = ch.dead_end.allowed;  // null at a dead end: the step's token is dropped, the choice ends
    }
    if (params.adjust.penalties()) {
      const SchedSequence* seq = scheduler_->find(p.seq_id);
      OLMO2_CHECK(seq, "planned sequence ", p.seq_id, " is unknown to the scheduler");
      std::vector<int32_t> out(seq->tokens.begin() + seq->prompt_len, seq->tokens.end());
      std::sort(out.begin(), out.end());
      for (size_t i = 0; i < out.size();) {
        size_t j = i;
        while (j < out.size() && out[j] == out[i]) ++j;
        r.output_counts.emplace_back(out[i], static_cast<int32_t>(j - i));
        i = j;
      }
      if (params.adjust.repetition_penalty != 1) r.prompt_ids = a.prompt_ids;
    }
  }
}

void ServingEngine::deliver(const StepPlan& plan, const std::vector<std::vector<SelectedToken>>& emitted,
                            std::vector<std::vector<SelectedToken>>& prompt) {
  const auto now = ServeRequest::Clock::now();
  int64_t proposed = 0, accepted = 0;  // drafted tokens verified, and accepted ones handed out
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const PlannedSequence& p = plan.sequences[i];
    const std::vector<SelectedToken>& got = emitted[i];
    const auto owner = seq_owner_.find(p.seq_id);
    if (owner == seq_owner_.end()) continue;
    Active& a = *active_.at(owner->second.first);
    const int32_t c = owner->second.second;
    Choice& ch = a.choices[static_cast<size_t>(c)];
    const CompletionParams& params = a.request->params();
    const bool nonfinite = (!got.empty() && got.front().id == kNonFiniteToken) ||
                           (i < prompt.size() && std::any_of(prompt[i].begin(), prompt[i].end(), [](const SelectedToken& s) {
                              return s.id == kNonFiniteToken;
                            }));
    if (nonfinite) {
      CompletionChunk error = nonfinite_answer(params, p.start + static_cast<int64_t>(p.tokens.size()) - 1,
                                               model_.config().num_hidden_layers);
      std::cerr << "request " << a.request->id() << ": " << error.error << std::endl;
      const std::string outcome = error.error_status == 400 ? "invalid" : "error";
      finish(owner->second.first, std::move(error), outcome);
      continue;
    }
    const int64_t plen = static_cast<int64_t>(params.prompt.size());
    if (i < prompt.size() && !prompt[i].empty()) {
      a.scored += static_cast<int64_t>(prompt[i].size());
      for (SelectedToken& s : prompt[i]) a.prompt_tokens.push_back(std::move(s));
    }
    if (params.prompt_logprobs && !a.prompt_done && c == 0 && a.scored >= plen - 1) {
      // Entry 0, the first prompt token, has no log-probability (the API reports null).
      SelectedToken first;
      first.id = params.prompt[0];
      ch.pending.prompt_tokens.push_back(first);
      for (SelectedToken& s : a.prompt_tokens) ch.pending.prompt_tokens.push_back(std::move(s));
      a.prompt_tokens.clear();
      a.prompt_done = true;
    }
    if (!p.sample) {
      if (params.max_tokens == 0 && p.start + static_cast<int64_t>(p.tokens.size()) == plen) {
        a.first_token = ch.last_token = now;
        CompletionChunk out = std::move(ch.pending);
        out.finish_reason = "length";
        finish_choice(a, c, std::move(out));
      }
      continue;
    }
    // Accepted drafted tokens and the target's own, in order, as plain decoding would hand
    // them out one per step; whatever follows the token that ends the choice is dropped.
    if (p.draft > 0 && !got.empty()) {
      proposed += p.draft;
      ch.spec_proposed += p.draft;
    }
    for (size_t j = 0; j < got.size(); ++j) {
      if (j + 1 < got.size()) ++accepted, ++ch.spec_accepted;  // a drafted token, counted before it may end the choice
      if (take_token(a, c, got[j], now)) break;
    }
  }
  if (metrics_ && proposed > 0) metrics_->speculated(proposed, accepted);
}

bool ServingEngine::take_token(Active& a, int32_t c, const SelectedToken& t, ServeRequest::Clock::time_point now) {
  Choice& ch = a.choices[static_cast<size_t>(c)];
  const CompletionParams& params = a.request->params();
  const std::vector<int64_t>& eos = stop_ids_;
  if (ch.constraint && !constrained_token(a, c, t.id)) return true;
  ++ch.generated;
  if (++a.generated == 1) a.first_token = now;
  if (ch.generated > 1 && metrics_) metrics_->inter_token(seconds_between(ch.last_token, now));
  ch.last_token = now;
  ch.cumulative_logprob += t.logprob;
  ch.pending.tokens.push_back(t);
  // EOS (unless ignore_eos) and the stop token ids end the text; their own text is
  // dropped unless include_stop_str_in_output (vLLM). Ids past the tokenizer's
  // vocabulary (the padding rows of a padded embedding) have no text.
  const bool stop_token =
      (!params.ignore_eos && std::find(eos.begin(), eos.end(), static_cast<int64_t>(t.id)) != eos.end()) ||
      contains(params.stop_token_ids, t.id);
  const bool has_text = t.id < tokenizer_->vocab_size() && (!stop_token || params.include_stop_str_in_output);
  // vLLM's min_tokens: a stop string must end in the text of a later token.
  const bool may_stop = ch.generated > params.min_tokens;
  std::string released = ch.matcher.push(has_text ? ch.decoder.push(t.id) : std::string(), may_stop);
  std::string reason;
  if (ch.matcher.stopped() || stop_token) {
    reason = "stop";
  } else if (ch.constraint && ch.constraint->closed() && ch.generated >= params.min_tokens) {
    reason = "stop";  // the constrained output is complete and nothing but EOS may follow
  } else if (ch.generated >= params.max_tokens) {
    reason = "length";
  }
  if (!reason.empty() && !ch.matcher.stopped()) {
    released += ch.matcher.push(ch.decoder.flush(), may_stop);
    if (!ch.matcher.stopped()) released += ch.matcher.flush();
    if (ch.matcher.stopped()) reason = "stop";
  }
  ch.pending.text += released;
  if (!reason.empty()) {
    CompletionChunk out = std::move(ch.pending);
    out.finish_reason = reason;
    finish_choice(a, c, std::move(out));
    return true;
  }
  if (!ch.pending.text.empty() || params.want_logprobs || !ch.pending.prompt_tokens.empty()) {
    CompletionChunk out = std::move(ch.pending);
    ch.pending = CompletionChunk{};
    out.choice = c;
    out.cumulative_logprob = ch.cumulative_logprob;
    a.request->push(std::move(out));
  }
  return false;
}

bool ServingEngine::constrained_token(Active& a, int32_t c, int32_t id) {
  Choice& ch = a.choices[static_cast<size_t>(c)];
  CompletionChunk error;
  error.choice = c;
  if (!ch.dead_end.error.empty()) {  // prepare_plan found no allowed token: this one is not the constraint's
    error.error = ch.dead_end.error + " (after " + std::to_string(ch.generated) + " tokens)";
    error.error_param = ch.dead_end.param;
    error.error_status = ch.dead_end.status;
  } else if (!ch.constraint->accept(id)) {  // the mask allowed it, so the matcher must: a bug, never a crash
    error.error = "internal error: token " + std::to_string(id) + " chosen after " + std::to_string(ch.generated) +
                  " tokens is outside the structured-output constraint";
    error.error_status = 500;
  } else {
    return true;
  }
  std::cerr << "request " << a.request->id() << ": " << error.error << std::endl;
  finish(a.request->id(), std::move(error), error.error_status == 400 ? "invalid" : "error");
  return false;
}

void ServingEngine::run_scheduler() {
  using Clock = ServeRequest::Clock;
  std::optional<Clock::time_point> deadline;
  for (;;) {
    drain_inbox();
    if (stop_.load()) {
      if (!deadline) deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(opt_.shutdown_grace_s));
      if (active_.empty() || Clock::now() >= *deadline || stop_now_.load()) {
        drain_inbox(true);  // the last requests that got in: answered below
        std::vector<int64_t> left;
        for (auto& [id, a] : active_) left.push_back(id);
        for (int64_t id : left) {
          CompletionChunk c;
          c.error = "the server shut down before this request finished";
          finish(id, std::move(c), "cancelled");
        }
        StepPlan bye;
        bye.shutdown = true;
        broadcast_plan(bye);
        return;
      }
    }
    const int64_t preempted_before = scheduler_->preemptions();
    const int64_t queries_before = scheduler_->prefix_cache_queries(), hits_before = scheduler_->prefix_cache_hits();
    StepPlan plan = scheduler_->schedule();
    if (metrics_ && scheduler_->preemptions() > preempted_before) {
      metrics_->preempted(scheduler_->preemptions() - preempted_before);
    }
    if (metrics_) {
      metrics_->prefix_cache(scheduler_->prefix_cache_queries() - queries_before,
                             scheduler_->prefix_cache_hits() - hits_before);
    }
    if (metrics_) metrics_->engine_state(scheduler_->running(), scheduler_->waiting(), scheduler_->kv_usage());
    if (plan.sequences.empty()) {
      std::unique_lock<std::mutex> lock(inbox_mutex_);
      inbox_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return !inbox_.empty() || stop_.load(); });
      continue;
    }
    const auto now = Clock::now();
    for (const PlannedSequence& p : plan.sequences) {
      Active& a = *active_.at(seq_owner_.at(p.seq_id).first);
      if (!a.scheduled) {
        a.scheduled = true;
        a.first_scheduled = now;
      }
    }
    propose(plan);
    prepare_plan(plan);
    broadcast_plan(plan);
    cache_.copy_blocks(plan.copies);  // copy-on-write of forks, before the step's forward
    std::vector<std::vector<SelectedToken>> prompt;
    const std::vector<std::vector<SelectedToken>> emitted = emitted_tokens(plan, execute(plan, &prompt));
    scheduler_->step_done(plan, emitted);
    deliver(plan, emitted, prompt);
    if (metrics_) metrics_->engine_state(scheduler_->running(), scheduler_->waiting(), scheduler_->kv_usage());
  }
}

}  // namespace olmo2
