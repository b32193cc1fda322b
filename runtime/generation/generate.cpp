#include "runtime/generation/generate.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/generation/token_selection.h"

namespace olmo2 {

void check_generate_request(const ModelConfig& c, const std::vector<int32_t>& prompt,
                            int64_t max_tokens) {
  if (prompt.empty()) OLMO2_THROW(InputError, "the prompt is empty (no BOS is added, so there is nothing to condition on)");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= c.vocab_size) {
      OLMO2_THROW(InputError, "prompt id ", prompt[i], " at position ", i,
                  " is outside the vocabulary [0, ", c.vocab_size, ")");
    }
  }
  if (max_tokens < 1) OLMO2_THROW(InputError, "max tokens must be at least 1, got ", max_tokens);
  const int64_t plen = static_cast<int64_t>(prompt.size());
  if (max_tokens > c.max_position_embeddings - plen) {  // not plen + max_tokens: that can overflow
    OLMO2_THROW(InputError, "prompt of ", plen, " tokens + max tokens ", max_tokens,
                " exceeds the context length ", c.max_position_embeddings);
  }
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
                        const SamplingParams& sampling, const ParallelContext& ctx) {
  const ModelConfig& c = model.config();
  check_generate_request(c, prompt, max_tokens);
  validate(sampling);
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + max_tokens;
  const KVCache cache = KVCache::contiguous(c, model.shard(), capacity, 16, model.device());
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
  while (static_cast<int64_t>(r.output_ids.size()) < max_tokens) {
    TokenBatch batch;
    batch.tokens.emplace_back(next);
    batch.start.push_back(cached);
    batch.block_tables.emplace_back(table);
    const ForwardResult out = model.forward(batch, &cache, opts, ctx);
    cached += static_cast<int64_t>(next.size());
    int32_t tok = -1;
    if (model.shard().final_norm) {
      request.draw = r.output_ids.size();
      tok = select_tokens({out.logits[0].view()}, model.shard(), {request}, ctx.tensor_parallel())[0].id;
    }
    if (pp) pp->broadcast(std::span<int32_t>(&tok, 1), pp->size() - 1);
    r.output_ids.push_back(tok);
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), tok) != c.eos_token_ids.end()) {
      r.finish_reason = "stop";
      break;
    }
    next.assign(1, tok);
  }
  return r;
}

}  // namespace olmo2
