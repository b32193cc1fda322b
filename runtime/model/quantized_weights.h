// Weight-quantized models for CPU serving and generation (docs/architecture.md §3.2
// "Quantized weights", the model side): which weights are quantized, in which groups,
// how tensor-parallel shards stay equal to the whole model, and the lm_head choice. The
// products themselves are ops/quantized_linear.h's.
#pragma once

#include <cstdint>
#include <string>

#include "ops/quantized_linear.h"
#include "runtime/model/config.h"
#include "runtime/model/shard_spec.h"
#include "runtime/model/weights.h"

namespace olmo2 {

/// How the linear weights of every decoder layer are quantized at load.
struct WeightQuantization {
  ops::QuantFormat format = ops::QuantFormat::Int8;
  /// Elements per scale along K (the weight's input dimension): int8 any multiple of 32,
  /// int4 32 or 64; 0: the model's default (default_quant_group). A fixed group — never
  /// "one per output channel" — so that a row-parallel weight's shard (o_proj, down_proj:
  /// K split over tensor-parallel ranks) holds exactly the groups of the whole weight's
  /// quantization.
  int64_t group = 0;
  bool operator==(const WeightQuantization&) const = default;
};

/// The default group of `format` for model `c`: int4 32; int8 the largest of 128, 64
/// and 32 that divides the hidden size, the intermediate size and the attention width
/// (128 for every OLMo 2 release; a function of the model alone, never of the layout, so
/// that every layout quantizes alike), else 32.
int64_t default_quant_group(ops::QuantFormat format, const ModelConfig& c);

/// `q` with its group resolved (0 → default_quant_group).
WeightQuantization resolved(const WeightQuantization& q, const ModelConfig& c);

/// The format named `text` ("int8" or "int4"). InputError naming `option` and the text
/// otherwise.
ops::QuantFormat parse_quant_format(const std::string& text, const std::string& option);

/// Checks resolved(q, c)'s group against its format (InputError naming the group and the format: int8
/// a positive multiple of 32, int4 32 or 64) and against every decoder-layer weight of
/// `shard` (InputError naming the weight, its K on this shard, the model's K and the
/// group, when the group does not divide it — under TP the row-parallel o_proj and
/// down_proj hold K/tp columns). Pure: every rank can check every rank's shard before
/// anything is read.
void check_quantization(const ModelConfig& c, const ShardSpec& shard, const WeightQuantization& q);

/// Quantizes the seven linear weights of `w` (q/k/v/o, gate/up/down) into w.quantized
/// and frees each dense tensor as soon as it is quantized (so that a layer is held
/// twice at most while loading). `w`'s tensors: f32 or bf16 on the CPU; `q` resolved.
/// Throws as ops::quantize_weight.
void quantize_layer(LayerWeights& w, const WeightQuantization& q);

/// Quantizes the lm_head of `w` (a shard's vocab rows, padding rows included) into
/// w.lm_head_quantized: int8 with one scale per output channel (group = hidden size)
/// whatever `q` says — the logits decide the sampled token: int8 halves a bf16 lm_head's
/// bytes (the largest single weight of the 1B model) at a step of max|w|/127 per row, far
/// finer than int4's; rows are split whole under TP, so shards equal the whole. Untied: lm_head is then freed. Tied: a quantized copy of embed_tokens is
/// made and embed_tokens kept dense (the embedding gathers one row per token, a dense
/// row costs nothing per step). Nothing when this shard holds no lm_head.
void quantize_lm_head(ModelWeights& w, const ModelConfig& c);

/// Bytes of weights `w` holds: dense tensors plus quantized values and scales.
int64_t resident_weight_bytes(const ModelWeights& w);

/// E.g. "int4 (groups of 32; lm_head int8 per channel; quantized products avx2)": what the
/// start lines of generate and serve say.
std::string quantization_text(const WeightQuantization& q);

}  // namespace olmo2
