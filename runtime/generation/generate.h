// One-shot generation (greedy or sampled), optionally reading and changing named
// activations (docs/architecture.md §13).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/communicator.h"
#include "runtime/generation/logits_adjustments.h"
#include "runtime/generation/sampling.h"
#include "runtime/model/model.h"
#include "runtime/trace/trace_spec.h"

namespace olmo2 {

struct GenerateResult {
  std::vector<int32_t> output_ids;  ///< generated tokens (the eos token included if hit)
  std::string finish_reason;        ///< "stop" (eos generated) or "length"
  /// The reads of GenerateTrace::spec (trace::ActivationStore::result(): per response key
  /// {"shape", "dtype", "positions", "reduce", "data"}) on world rank 0 — or the one
  /// process — when the spec has reads; null otherwise.
  nlohmann::json activations;
};

/// What generate reads and changes in its forwards (docs/architecture.md §13).
struct GenerateTrace {
  /// The reads and interventions (parse_trace_request); null or empty: untraced, the
  /// forwards run exactly as without tracing (no tap, nothing gathered). Its prompt_len
  /// is ignored: generate sets it to the prompt's length.
  const trace::TraceSpec* spec = nullptr;
  /// Every rank of the job (each of them calls generate with the same spec): after each
  /// forward the reads' pieces go to its rank 0 (trace::gather_pieces). Null: one process.
  parallel::Communicator* world = nullptr;
  /// Whether this rank's pieces are sent: false on data-parallel replicas other than the
  /// one of world rank 0 (they compute the same tokens, interventions included, and only
  /// join the gathers).
  bool send_reads = true;
};

/// Greedy decoding (argmax, first index on ties, as `torch.argmax`) with a KV cache:
/// one prefill of `prompt`, then one token per step until `max_tokens` tokens or the
/// config's eos token. Throws InputError for an empty prompt, an id outside the
/// vocabulary (naming it and its position), max_tokens < 1, or prompt + max_tokens
/// over max_position_embeddings (naming all three numbers).
GenerateResult generate_greedy(const Olmo2Model& model, const std::vector<int32_t>& prompt,
                               int64_t max_tokens);

/// The same on a sharded model: every rank of the TP and PP groups calls it with the
/// same prompt; the last stage picks each token and broadcasts it over the pipeline
/// group, so every rank returns the same result, equal to the single-process one.
GenerateResult generate_greedy(const Olmo2Model& model, const std::vector<int32_t>& prompt,
                               int64_t max_tokens, const ParallelContext& ctx);

/// Generation with `sampling` (greedy when its temperature is 0, identical to
/// generate_greedy), one token per step through a contiguous KV cache (KVCache with
/// consecutive blocks, on the model's device: on a GPU only the row's candidates come
/// back to the host, its whole logits row only when sampling without top_k). Tokens are chosen by select_tokens — the token picker serving
/// uses — from the vocab-parallel logits of the last pipeline stage (draw n of the
/// request's seed for its n-th token), which broadcasts each token over the pipeline
/// group, so every layout gives the same tokens. Throws as generate_greedy, and
/// InputError for invalid sampling parameters.
///
/// With `trace` (docs/architecture.md §13) each forward gets an ActivationRecorder as its
/// tap (positions already fed are not recorded again; the prefill computes every prompt
/// row's logits when lm_head_output/logits is touched), and after each forward with reads
/// every rank of trace.world sends its pieces to world rank 0, whose ActivationStore
/// fills the result's `activations`. Throws Error when trace.world is null in a sharded
/// layout, CollectiveTimeout when a peer never joins a gather.
///
/// `kv_dtype`: the KV cache's pools, f32 or bf16 (--kv-cache-dtype; nullopt: auto, the
/// model's precision's: kv_cache_dtype, docs/architecture.md §3.2). `adjust`: logit_bias
/// and penalties as the server applies them (the repetition penalty over the prompt's
/// and the output's ids; generation_config.json's repetition_penalty comes this way);
/// InputError as request_rules' adjustment_rules. Generation stops at any of the
/// config's stop_token_ids (config.json's and generation_config.json's eos ids).
GenerateResult generate(const Olmo2Model& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                        const SamplingParams& sampling, const ParallelContext& ctx = {},
                        const GenerateTrace& trace = {}, std::optional<DType> kv_dtype = std::nullopt,
                        const LogitsAdjustments& adjust = {});

/// The checks generate_greedy makes before any work (request_rules.h: empty prompt, ids outside the
/// vocabulary, max_tokens < 1, prompt + max_tokens over the context); every rank of a
/// sharded run makes them identically. Throws InputError naming the numbers.
void check_generate_request(const ModelConfig& config, const std::vector<int32_t>& prompt,
                            int64_t max_tokens);

}  // namespace olmo2
