// Internal to runtime/model/config*.cpp: Olmo 3's attention fields of config.json
// (layer_types, sliding_window, RoPE per layer type; docs/architecture.md §3).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/model/config.h"
#include "runtime/model/config_reader.h"

namespace olmo2::config_detail {

/// Olmo3Config.default_theta (configuration_olmo3.py): the θ of a layer type whose RoPE
/// names none.
inline constexpr double kOlmo3DefaultTheta = 500000.0;
/// config.json's names of the two layer types.
extern const char* const kFull;     // "full_attention"
extern const char* const kSliding;  // "sliding_attention"
/// Olmo3Config's sliding_window when config.json has no such key.
inline constexpr int64_t kOlmo3DefaultWindow = 4096;

/// Reads an Olmo 3 config's layer_types, sliding_window and RoPE (both spellings:
/// transformers 4's rope_theta + rope_scaling, 5's rope_parameters per layer type) into
/// c.layer_types, c.sliding_window, c.rope_full, c.rope_sliding and c.rope_theta, as
/// Olmo3Config.convert_rope_params_to_dict and standardize_rope_params resolve them.
/// Needs c.num_hidden_layers and c.max_position_embeddings read. Throws InputError
/// naming the field and value for a wrong type, a value out of range, an unknown layer
/// or RoPE type, a RoPE field not computed here (mscale, mscale_all_dim,
/// partial_rotary_factor), truncate false (5.24 ignores it per layer type) or a
/// contradiction between the spellings.
void read_olmo3_attention(const Reader& r, ModelConfig& c);

/// Reads an OLMo 2 config's RoPE (rope_theta or rope_parameters {default}) into c and
/// makes every layer Full with plain RoPE; refuses rope_scaling, layer_types and
/// sliding_window by name (InputError).
void read_olmo2_attention(const Reader& r, ModelConfig& c);

/// Sets in `j` (a config.json object being written) what transformers 5.24's
/// save_pretrained writes for an Olmo 3 config: model_type olmo3, layer_types,
/// sliding_window and rope_parameters per layer type (no rope_theta / rope_scaling).
void write_olmo3_attention(const ModelConfig& c, nlohmann::json& j);

/// Lines of `olmo2 info` for Olmo 3: the layer types (counts and pattern), the window
/// and each layer type's RoPE.
std::string olmo3_summary(const ModelConfig& c);

}  // namespace olmo2::config_detail
