// OLMo 2 and Olmo 3 model configuration, read from a Hugging Face `config.json`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ops/dtype.h"
#include "parallel/partition.h"

namespace olmo2 {

/// What one layer's attention sees (Olmo 3's `layer_types`): every earlier position, or
/// the last `sliding_window` positions including its own. OLMo 2 layers are all Full.
enum class AttentionType { Full, Sliding };

/// The RoPE of one layer type (transformers 5's `rope_parameters[layer_type]`; 4.x's
/// `rope_theta` + `rope_scaling`, which applies to full-attention layers only).
struct RopeParameters {
  std::string type = "default";  ///< "default" (plain RoPE) or "yarn"
  double theta = 0;              ///< rope_theta
  // YaRN (Peng et al., 2023), as transformers' `_compute_yarn_parameters`:
  double factor = 1;                              ///< context extension factor (≥ 1)
  int64_t original_max_position_embeddings = 0;   ///< the pre-extension context
  std::optional<double> attention_factor;         ///< else 0.1·ln(factor) + 1 (1 when factor ≤ 1)
  double beta_fast = 32, beta_slow = 1;           ///< the ramp's rotation bounds
  bool truncate = true;                           ///< floor/ceil the correction range
  bool operator==(const RopeParameters&) const = default;
};

/// The fields of `Olmo2Config` / `Olmo3Config` (transformers, configuration_olmo2.py,
/// configuration_olmo3.py) this program uses. Sizes are element counts; head_dim is
/// derived as hidden_size / num_attention_heads.
struct ModelConfig {
  std::string architecture = "Olmo2ForCausalLM";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 0;
  double rope_theta = 0;  ///< full-attention layers' θ (= rope_full.theta)
  /// Olmo 3: per layer, Full or Sliding (OLMo 2: all Full); num_hidden_layers entries.
  std::vector<AttentionType> layer_types;
  int64_t sliding_window = 0;  ///< positions a Sliding layer sees (its own included); 0 without
  RopeParameters rope_full;     ///< RoPE of Full layers (Olmo 3: YaRN when configured)
  RopeParameters rope_sliding;  ///< RoPE of Sliding layers (plain)
  double initializer_range = 0.02;
  bool tie_word_embeddings = false;
  std::vector<int64_t> eos_token_ids;  ///< config.json's eos_token_id: generation stops at any of them
  /// generation_config.json's eos ids not among eos_token_ids (an instruct model's
  /// end-of-turn token), set by the launcher (docs/architecture.md §8, "Stop ids and
  /// sampling defaults"); never read from or written to config.json.
  std::vector<int64_t> generation_eos_token_ids;
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> bos_token_id;
  DType dtype = DType::F32;  ///< `torch_dtype` / `dtype` of the checkpoint

  /// Parses and validates a config.json object of Olmo2ForCausalLM or Olmo3ForCausalLM.
  /// `source` names the file in messages. Olmo 3's layer_types (default: every 4th layer
  /// full), sliding_window (default 4096, as Olmo3Config) and RoPE per layer type are read
  /// in transformers 4's spelling (rope_theta + rope_scaling, the latter for full layers)
  /// and 5's (rope_parameters.{full_attention,sliding_attention}), resolved as
  /// Olmo3Config does; OLMo 2 gets all-Full layers and rope_full = rope_sliding = plain
  /// RoPE at rope_theta. Throws InputError for another architecture (naming it), a
  /// missing required field, a field of the wrong type, or contradictory values (e.g.
  /// hidden_size % heads ≠ 0, an explicit head_dim ≠ hidden_size / heads, heads % kv
  /// heads ≠ 0, rope_scaling or layer_types on OLMo 2, attention_bias true, hidden_act
  /// other than silu), and on Olmo 3 for a layer_types entry or length that is wrong, a
  /// window ≤ 0, a RoPE type other than default/yarn, a YaRN factor < 1,
  /// original_max_position_embeddings ≤ 0, attention_factor ≤ 0, beta_fast < beta_slow,
  /// mscale / mscale_all_dim / partial_rotary_factor, truncate false, or the two
  /// spellings disagreeing — each naming the field and its value.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);

  /// Reads `dir/config.json`. Throws InputError when it is missing or invalid.
  static ModelConfig load(const std::string& dir);

  /// Reads a config.json file at `path` (e.g. `olmo2 train --model-config`). Throws
  /// InputError when it cannot be read or is invalid, naming the path.
  static ModelConfig load_file(const std::string& path);

  /// The config.json object `transformers` reads back as the same model.
  nlohmann::json to_json() const;

  /// Number of parameters: embedding, lm_head (unless tied), per layer q/k/v/o,
  /// q_norm/k_norm, gate/up/down and two post-norms, and the final norm. (from_json
  /// bounds every size so that this cannot overflow.)
  int64_t parameter_count() const;

  /// Every id generation stops at: eos_token_ids, then generation_eos_token_ids.
  std::vector<int64_t> stop_token_ids() const;
  /// Adds `ids` (generation_config.json's eos ids) that are not in eos_token_ids (nor
  /// already added) to generation_eos_token_ids, in order.
  void add_generation_eos_token_ids(const std::vector<int64_t>& ids);

  /// Whether this is an Olmo 3 model (architecture Olmo3ForCausalLM).
  bool olmo3() const { return architecture == "Olmo3ForCausalLM"; }
  /// Whether any layer is a Sliding one.
  bool has_sliding_layers() const;
  /// The attention window of layer `layer` (0-based, of the whole model): sliding_window
  /// for a Sliding layer, 0 (no window) for a Full one (or when layer_types is empty, a
  /// config built field by field). Throws ShapeError for a layer outside
  /// [0, num_hidden_layers).
  int64_t attention_window(int64_t layer) const;
  /// The RoPE parameters layer `layer` uses (rope_full or rope_sliding). A config built
  /// field by field (layer_types empty, rope_full.theta 0) gets plain RoPE at rope_theta.
  /// Throws ShapeError for a layer outside [0, num_hidden_layers).
  RopeParameters rope_parameters(int64_t layer) const;

  /// Multi-line human-readable summary (for `olmo2 info`).
  std::string summary() const;
};

/// An Olmo 3 config with `base`'s sizes and tokens (for tests and `olmo2_random_model
/// --olmo3`): layer types from `pattern` (letters S = sliding, F = full, repeated over the
/// layers; empty = Olmo3Config's default, every 4th layer full), sliding_window `window`,
/// the full layers' RoPE `full_rope` (e.g. YaRN; its theta 0 = base.rope_theta; none =
/// plain RoPE), the sliding layers' plain RoPE at base.rope_theta. Made as a config.json
/// and read by from_json, so it is validated as one; throws InputError for a bad pattern
/// letter or any value from_json refuses.
ModelConfig olmo3_config(const ModelConfig& base, int64_t window, const std::string& pattern = "",
                         std::optional<RopeParameters> full_rope = std::nullopt);

/// The sizes the partition plan needs (parallel/ does not read configs).
parallel::ModelShape model_shape(const ModelConfig& c);

}  // namespace olmo2
