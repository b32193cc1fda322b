// generation_config.json of a checkpoint: the config's eos / pad / bos ids and what the
// model the run started from had in its own generation_config.json — its stop ids (an
// instruct model's end-of-turn token) and its sampling values — so a fine-tuned model
// stops and samples as the one it came from (docs/architecture.md §7 "Checkpoints", §8).
// The file is read with generate's and serve's own reader (read_generation_config), so a
// checkpoint never keeps a value they would refuse.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/model/config.h"

namespace olmo2 {

/// What a checkpoint keeps of DIR/generation_config.json, read by read_generation_config
/// against a vocabulary of `vocab_size` ids: an object with "eos_token_id" (always a list,
/// when the file has one) and the sampling values it sets ("temperature", "top_p",
/// "top_k", "min_p", "repetition_penalty", "max_new_tokens", "do_sample"); an empty object
/// when DIR has no such file or "" is given. Other fields are dropped. Throws InputError
/// as read_generation_config: naming the file and the field for a value of the wrong
/// type, an id outside the vocabulary, or a sampling value generate and serve refuse.
nlohmann::json generation_config_to_keep(const std::string& dir, int64_t vocab_size);

/// The generation_config.json a checkpoint writes: {"_from_model_config": true} (as
/// transformers writes one derived from config.json) with `config`'s eos_token_id —
/// followed by `kept`'s eos ids it lacks, in their order; an id when there is one, else a
/// list — pad_token_id and bos_token_id, and `kept`'s sampling values.
nlohmann::json checkpoint_generation_config(const ModelConfig& config, const nlohmann::json& kept);

}  // namespace olmo2
