#include "runtime/generation/generate.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "runtime/generation/request_rules.h"
#include "runtime/generation/token_selection.h"
#include "runtime/trace/activation_recorder.h"

namespace olmo2 {

namespace {
/// The tracing of one generation (docs/architecture.md §13): a recorder for each forward,
/// its pieces gathered to world rank 0 after it, and there one store for the reads.
class GenerationTrace {
 public:
  GenerationTrace(const Olmo2Model& model, const GenerateTrace& t, int64_t prompt_len, const ParallelContext& ctx)
      : model_(model), trace_(t), tp_rank_(ctx.tensor_parallel() ? ctx.tp->rank() : 0) {
    if (!t.spec || t.spec->empty()) return;
    OLMO2_CHECK(t.world || (!ctx.tensor_parallel() && !ctx.pipeline()),
                "a traced generation over several ranks needs the world communicator");
    spec_ = t.spec->for_prompt(prompt_len);
    if (!spec_->reads.empty() && (!t.world || t.world->rank() == 0)) {
      store_ = std::make_unique<trace::ActivationStore>(spec_, model.config());
    }
  }
  bool on() const { return spec_ != nullptr; }
  /// Whether the logits of every prompt row are needed (lm_head_output/logits touched).
  bool wants_every_logit() const { return on() && spec_->touches(TapSite::LmHeadOutput, -1); }
  /// The tap of the next forward, whose first new token is at position `fed`.
  ForwardTap* start(int64_t fed) {
    recorder_ = std::make_unique<trace::ActivationRecorder>(
        model_.config(), model_.shard(), tp_rank_,
        std::vector<trace::TracedSequence>{trace::TracedSequence{spec_.get(), 0, fed}});
    return recorder_.get();
  }
  /// After the forward: its reads to world rank 0 (every rank of the job calls it).
  void finish() {
    if (spec_->reads.empty()) return;  // interventions only: nothing crosses ranks
    if (!trace_.world) {
      store_->add(recorder_->pieces(), 0);
      return;
    }
    const std::vector<float> none;
    const std::vector<float> all = trace::gather_pieces(*trace_.world, trace_.send_reads ? recorder_->pieces() : none);
    if (store_) store_->add(all, 0);
  }
  nlohmann::json result() const { return store_ ? store_->result() : nlohmann::json(); }

 private:
  const Olmo2Model& model_;
  const GenerateTrace& trace_;
  int tp_rank_;
  std::shared_ptr<const trace::TraceSpec> spec_;
  std::unique_ptr<trace::ActivationStore> store_;
  std::unique_ptr<trace::ActivationRecorder> recorder_;
};
}  // namespace

void check_generate_request(const ModelConfig& c, const std::vector<int32_t>& prompt,
                            int64_t max_tokens) {
  const PromptNames names{"prompt", "the prompt", false, "max_tokens"};
  throw_if_broken(prompt_rule(prompt, c.vocab_size, names));
  throw_if_broken(max_tokens_rule(max_tokens, false, names));
  throw_if_broken(context_rule(static_cast<int64_t>(prompt.size()), max_tokens, c.max_position_embeddings, names));
}

GenerateResult generate_greedy(const Olmo2Model& model, const std::vector<int32_t>& prompt,
                               int64_t max_tokens) {
  return generate_greedy(model, prompt, max_tokens, ParallelContext{});
}

GenerateResult generate_greedy(const Olmo2Model& model, const std::vector<int32_t>& prompt,
                               int64_t max_tokens, const ParallelContext& ctx) {
  return generate(model, prompt, max_tokens, SamplingParams{}, ctx);
}

GenerateResult generate(const Olmo2Model& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                        const SamplingParams& sampling, const ParallelContext& ctx, const GenerateTrace& trace,
                        std::optional<DType> kv_dtype, const LogitsAdjustments& adjust) {
  const ModelConfig& c = model.config();
  check_generate_request(c, prompt, max_tokens);
  validate(sampling);
  throw_if_broken(adjustment_rules(adjust, c.vocab_size));
  const std::vector<int64_t> stop_ids = c.stop_token_ids();
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + max_tokens;
  const KVCache cache = KVCache::contiguous(c, model.shard(), capacity, 16, model.device(),
                                            kv_cache_dtype(kv_dtype, model.precision()));
  // Every KV group its own consecutive blocks, nothing released (docs/architecture.md §8).
  const std::vector<int32_t> table = cache.contiguous_table(capacity);
  parallel::Communicator* pp = ctx.pipeline();
  GenerateResult r;
  r.finish_reason = "length";
  std::vector<int32_t> next(prompt);
  int64_t cached = 0;
  ForwardOptions opts;
  opts.last_logits_only = true;
  opts.vocab_parallel_logits = true;
  SelectionRequest request;
  request.params = sampling;
  request.adjust = adjust;
  if (adjust.repetition_penalty != 1) {
    request.prompt_ids = prompt;
    std::sort(request.prompt_ids.begin(), request.prompt_ids.end());
    request.prompt_ids.erase(std::unique(request.prompt_ids.begin(), request.prompt_ids.end()), request.prompt_ids.end());
  }
  GenerationTrace traced(model, trace, static_cast<int64_t>(prompt.size()), ctx);
  while (static_cast<int64_t>(r.output_ids.size()) < max_tokens) {
    TokenBatch batch;
    batch.tokens.emplace_back(next);
    batch.start.push_back(cached);
    batch.block_tables.emplace_back(table);
    if (traced.on()) {
      opts.tap = traced.start(cached);
      opts.all_logits = {cached == 0 && traced.wants_every_logit()};
    }
    const ForwardResult out = model.forward(batch, &cache, opts, ctx);
    if (traced.on()) traced.finish();
    cached += static_cast<int64_t>(next.size());
    int32_t tok = -1;
    if (model.shard().final_norm) {
      request.draw = r.output_ids.size();
      const TensorView logits = out.logits[0].view();  // every prompt row's when all_logits
      tok = select_tokens({logits.rows(logits.size(0) - 1, logits.size(0))}, model.shard(), {request},
                          ctx.tensor_parallel())[0].id;
    }
    if (pp) pp->broadcast(std::span<int32_t>(&tok, 1), pp->size() - 1);
    r.output_ids.push_back(tok);
    if (adjust.penalties()) {  // (id, count) ascending by id
      auto& counts = request.output_counts;
      auto it = std::lower_bound(counts.begin(), counts.end(), std::pair<int32_t, int32_t>{tok, 0});
      if (it != counts.end() && it->first == tok) ++it->second;
      else counts.insert(it, {tok, 1});
    }
    if (std::find(stop_ids.begin(), stop_ids.end(), tok) != stop_ids.end()) {
      r.finish_reason = "stop";
      break;
    }
    next.assign(1, tok);
  }
  r.activations = traced.result();
  return r;
}

}  // namespace olmo2
