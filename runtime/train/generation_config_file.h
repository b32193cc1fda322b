// generation_config.json of a checkpoint: the config's eos / pad / bos ids and what the
// model the run started from had in its own generation_config.json — its stop ids (an
// instruct model's end-of-turn token) and its sampling values — so a fine-tuned model
// stops and samples as the one it came from (docs/architecture.md §7 "Checkpoints", §8).
// The train layer does not read the generation library: the values are kept as written
// and checked for their JSON type only; `generate` and `serve` check their ranges at load.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/model/config.h"

namespace olmo2 {

/// What a checkpoint keeps of DIR/generation_config.json: an object with "eos_token_id"
/// (always a list) and, when set (not null), "temperature", "top_p", "top_k", "min_p",
/// "repetition_penalty", "max_new_tokens" and "do_sample"; an empty object when DIR has
/// no such file or "" is given. Other fields are dropped. Throws InputError naming the
/// file and the field for a file that is not a JSON object, an eos_token_id that is
/// neither an id nor a list of ids (integers ≥ 0), or a kept value of the wrong type
/// (numbers; integers for top_k and max_new_tokens; true/false for do_sample).
nlohmann::json generation_config_to_keep(const std::string& dir);

/// The generation_config.json a checkpoint writes: {"_from_model_config": true} (as
/// transformers writes one derived from config.json) with `config`'s eos_token_id —
/// followed by `kept`'s eos ids it lacks, in their order; an id when there is one, else a
/// list — pad_token_id and bos_token_id, and `kept`'s sampling values.
nlohmann::json checkpoint_generation_config(const ModelConfig& config, const nlohmann::json& kept);

}  // namespace olmo2
