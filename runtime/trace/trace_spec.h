// What a request asks to read (`activations`) and change (`interventions`) in the
// forward, by nnterp's standard names (docs/architecture.md §13): parsed from the API's
// JSON, checked against the model, and sent with each step's plan to every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/model/config.h"
#include "runtime/model/forward_tap.h"

namespace olmo2::trace {

/// How a read is reduced before it is returned (and before it crosses ranks).
enum class Reduce : int32_t {
  None = 0,  ///< the whole tensor
  Norm,      ///< the L2 norm over the feature axis, per token (per head for head-level names)
  Mean,      ///< the mean over the selected positions
};

/// Which token positions a read or an intervention covers. A sequence's positions are
/// 0 … prompt_len−1 (the prompt) and prompt_len … (generated tokens fed back to the model;
/// the last generated token is never fed, so it has no activations).
struct PositionSelector {
  enum class Kind : int32_t { All = 0, Prompt, Generated, List, From } kind = Kind::All;
  std::vector<int64_t> list;  ///< Kind::List: ascending, unique, ≥ 0
  int64_t from = 0;           ///< Kind::From: every position ≥ from
  /// Whether position `p` of a sequence whose prompt has `prompt_len` tokens is covered.
  bool contains(int64_t p, int64_t prompt_len) const;
};

/// One requested name, expanded to its layers.
struct ActivationRead {
  std::string name;        ///< nnterp's name without the layer, e.g. "attention_premix", "logits"
  TapSite site = TapSite::LayerOutput;
  std::vector<int64_t> layers;  ///< ascending; empty for a model-wide name
  Reduce reduce = Reduce::None;
  PositionSelector positions;   ///< All, Prompt or Generated
  /// The response key of layer `layer` (−1: model-wide): "layers.3.layer_output", with
  /// ":norm" / ":mean" appended for a reduced read.
  std::string key(int64_t layer) const;
};

/// One change to the forward, applied on every rank that holds what it changes.
struct Intervention {
  enum class Kind : int32_t { Add = 0, AblateHead } kind = Kind::Add;
  /// Add: LayerOutput, AttentionOutput or MlpOutput (x ← x + coefficient·vector at the
  /// selected positions). AblateHead: AttentionHeadOutputs (head `head`'s columns ← 0).
  TapSite site = TapSite::LayerOutput;
  std::vector<int64_t> layers;  ///< ascending, unique
  std::vector<float> vector;    ///< Add: [hidden_size]
  float coefficient = 1.0f;     ///< Add
  int64_t head = -1;            ///< AblateHead: query head index in the whole model
  PositionSelector positions;
};

/// Everything one request traces.
struct TraceSpec {
  std::vector<ActivationRead> reads;
  std::vector<Intervention> interventions;
  int64_t prompt_len = 0;  ///< set when the request's prompt is known
  bool empty() const { return reads.empty() && interventions.empty(); }
  /// A copy for a prompt of `prompt_len` tokens (which splits positions into prompt and
  /// generated), shared as the engine, generate and trace hold it.
  std::shared_ptr<const TraceSpec> for_prompt(int64_t prompt_len) const;
  /// Whether some read covers a prompt position (then the prompt is computed, never taken
  /// from the prefix cache).
  bool reads_prompt() const;
  /// Whether some read or intervention involves `site` of `layer` (−1: model-wide).
  bool touches(TapSite site, int64_t layer) const;
  /// A byte string equal for two specs exactly when their interventions steer the same
  /// absolute positions alike: the interventions, and prompt_len when one of them covers
  /// "prompt" or "generated" (the prefix cache's key for steered requests; empty without
  /// interventions).
  std::string intervention_key() const;
  /// The spec as int64 words (floats bit-cast) for a step's plan; decode() reverses it
  /// from `words` starting at `pos`, which it advances. decode throws Error on a
  /// malformed encoding.
  void encode(std::vector<int64_t>& words) const;
  static TraceSpec decode(std::span<const int64_t> words, size_t& pos);
};

/// Parses a request's `activations` and `interventions` (either may be null/absent) and
/// checks them against `config`. `activations` is a list whose entries are a name string
/// (reduce none, positions all) or {"name", "reduce": "none"|"norm"|"mean", "positions":
/// "all"|"prompt"|"generated"}; a name is a model-wide name or "layers.<sel>.<name>" with
/// <sel> a layer index, "*" (every layer) or "A:B" (layers A … B−1). `interventions` is a
/// list of {"type": "add", "name": "layers.<sel>.(layer_output|attention_output|
/// mlp_output)", "vector": base64 little-endian f32 [hidden], "coefficient" (default 1),
/// "positions"} or {"type": "ablate_head", "layer", "head", "positions"}, positions being
/// "all"|"prompt"|"generated", a list of positions or {"from": p}. Throws InputError
/// naming the field (e.g. "activations[2].name") and the offending value: an unknown name,
/// a layer or head out of range, a duplicate response key, a vector of the wrong length
/// or not base64, a non-finite coefficient or vector entry.
TraceSpec parse_trace_request(const nlohmann::json* activations, const nlohmann::json* interventions,
                              const ModelConfig& config);

/// The shape of one read's result for one sequence (no batch axis; nnterp's layout):
/// residual names [P, h], attention_queries [H, P, hd], attention_keys/values [KV, P, hd],
/// attention_probabilities [H, P, K] (K = last covered position + 1), attention_premix/
/// head_outputs [P, H, hd], mlp_neurons [P, inter], logits/lm_head_output [P, vocab];
/// Norm drops the feature axis (hd, h, inter, vocab, K), Mean drops the position axis P.
/// `positions` P, `keys` K.
std::vector<int64_t> read_shape(const ActivationRead& read, const ModelConfig& config, int64_t positions,
                                int64_t keys);

/// The most bytes (f32) a request's reads can return: every layer's result at its largest,
/// for a prompt of `prompt_len` tokens and at most `max_tokens` generated ones.
int64_t activation_bytes(const TraceSpec& spec, const ModelConfig& config, int64_t prompt_len,
                         int64_t max_tokens);

/// Base64 (RFC 4648, with padding) of `bytes`, and back. decode throws InputError
/// naming `field` for text that is not base64.
std::string base64_encode(std::span<const uint8_t> bytes);
std::vector<uint8_t> base64_decode(const std::string& text, const std::string& field);

}  // namespace olmo2::trace
