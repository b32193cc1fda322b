// generation_config.json of a model directory: the stop ids and the default sampling
// values transformers' generate() and vLLM (--generation-config auto) take from it
// (docs/architecture.md §8, "Stop ids and sampling defaults").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/generation/sampling.h"

namespace olmo2 {

/// The sampling values a generation_config.json sets; each unset one leaves the
/// command's or the API's own default.
struct GenerationDefaults {
  std::optional<double> temperature;         ///< ≥ 0
  std::optional<double> top_p;               ///< (0, 1]
  std::optional<int64_t> top_k;              ///< ≥ 0 (0 and −1 in the file: no limit, read as 0)
  std::optional<double> min_p;               ///< [0, 1]
  std::optional<double> repetition_penalty;  ///< > 0
  std::optional<int64_t> max_new_tokens;     ///< ≥ 1
  /// transformers' do_sample (default false: greedy, its temperature, top_k and top_p
  /// unused). `olmo2 generate` follows it; the server follows vLLM, which ignores it.
  std::optional<bool> do_sample;
  /// Whether any sampling value (not do_sample alone) is set.
  bool any() const;
  /// "temperature 0.6, top_p 0.9, max_new_tokens 512" (the set values in this order:
  /// temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens, do_sample), or
  /// "none".
  std::string describe() const;
};

/// The parts of generation_config.json this project reads.
struct GenerationConfig {
  std::string path;                     ///< the file read
  std::vector<int64_t> eos_token_ids;   ///< eos_token_id: an id or a list (stop at any)
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> bos_token_id;
  GenerationDefaults defaults;
};

/// Reads DIR/generation_config.json; nullopt when the directory has none. Fields other
/// than those of GenerationConfig are ignored (transformers writes many); JSON null reads
/// as absent. Throws InputError naming the file and the field for a file that is not a
/// JSON object, an id that is not an integer in [0, vocab_size), a value of the wrong
/// type, or a sampling value outside the range the API accepts (the rules of
/// runtime/generation/request_rules.h: temperature < 0, top_p outside (0, 1], top_k < −1,
/// min_p outside [0, 1], repetition_penalty ≤ 0, max_new_tokens < 1).
std::optional<GenerationConfig> read_generation_config(const std::string& dir, int64_t vocab_size);

/// `sampling` with the defaults of transformers' generate() where the command line left
/// a value out (`given_*` false): only when defaults.do_sample is true are temperature
/// (else 1.0), top_k (else 50), top_p and min_p taken — 1.0 and 50 are the values
/// transformers' generate() applies when neither the model's file nor the caller sets
/// them (GenerationConfig's global defaults); greedy otherwise. `olmo2 generate` and
/// `olmo2 trace` use it.
SamplingParams apply_generate_defaults(SamplingParams sampling, const GenerationDefaults& defaults,
                                       bool given_temperature, bool given_top_k, bool given_top_p);

}  // namespace olmo2
