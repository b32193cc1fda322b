#include "runtime/model/quantized_weights.h"

#include "core/error.h"

namespace olmo2 {

int64_t default_quant_group(ops::QuantFormat format, const ModelConfig& c) {
  if (format == ops::QuantFormat::Int4) return 32;
  const int64_t width = c.num_attention_heads * c.head_dim;
  for (int64_t g : {128, 64}) {
    if (c.hidden_size % g == 0 && c.intermediate_size % g == 0 && width % g == 0) return g;
  }
  return 32;
}

WeightQuantization resolved(const WeightQuantization& q, const ModelConfig& c) {
  WeightQuantization r = q;
  if (r.group == 0) r.group = default_quant_group(q.format, c);
  return r;
}

ops::QuantFormat parse_quant_format(const std::string& text, const std::string& option) {
  if (text == "int8") return ops::QuantFormat::Int8;
  if (text == "int4") return ops::QuantFormat::Int4;
  OLMO2_THROW(InputError, option, " must be int8 or int4, got \"", text, "\"");
}

void check_quantization(const ModelConfig& c, const ShardSpec& shard, const WeightQuantization& given) {
  const WeightQuantization q = resolved(given, c);
  const char* name = ops::quant_format_name(q.format);
  if (q.format == ops::QuantFormat::Int4 ? q.group != 32 && q.group != 64 : q.group <= 0 || q.group % 32 != 0) {
    OLMO2_THROW(InputError, "weight group ", q.group, " for ", name,
                q.format == ops::QuantFormat::Int4 ? ": int4 takes groups of 32 or 64"
                                                   : ": int8 takes a positive multiple of 32");
  }
  // K of each weight on this shard: the hidden size for the column-parallel ones, this
  // rank's columns of the whole K for the row-parallel ones.
  struct Weight {
    const char* what;
    int64_t k, whole;
  };
  const int64_t hd = c.head_dim;
  const Weight weights[] = {
      {"q_proj, k_proj, v_proj, gate_proj and up_proj", c.hidden_size, c.hidden_size},
      {"o_proj", shard.q_heads.size() * hd, c.num_attention_heads * hd},
      {"down_proj", shard.mlp_rows.size(), c.intermediate_size},
  };
  for (const Weight& w : weights) {
    if (w.k % q.group == 0) continue;
    // Every group is a multiple of 32: a K that is not has no group at all.
    if (w.whole % 32 != 0)
      OLMO2_THROW(InputError, "this model cannot take quantized weights: the K of ", w.what, " is ", w.whole,
                  ", not a multiple of 32 (every quantization group is one)");
    OLMO2_THROW(InputError, "weight group ", q.group, " does not divide the K of ", w.what, ": ", w.k,
                w.k == w.whole ? std::string(" (the model's)")
                               : " on this tensor-parallel rank (" + std::to_string(w.whole) + " in the model)",
                "; give another group (", name, ": ",
                q.format == ops::QuantFormat::Int4 ? "32 or 64" : "a multiple of 32", ") or another layout");
  }
}

namespace {
/// `dense` quantized, and freed.
ops::QuantizedWeight quantize_and_free(Tensor& dense, const WeightQuantization& q) {
  ops::QuantizedWeight out = ops::quantize_weight(dense.view(), q.format, q.group);
  dense = Tensor();
  return out;
}
}  // namespace

void quantize_layer(LayerWeights& w, const WeightQuantization& q) {
  QuantizedLinears& o = w.quantized;
  o.q_proj = quantize_and_free(w.q_proj, q);
  o.k_proj = quantize_and_free(w.k_proj, q);
  o.v_proj = quantize_and_free(w.v_proj, q);
  o.o_proj = quantize_and_free(w.o_proj, q);
  o.gate_proj = quantize_and_free(w.gate_proj, q);
  o.up_proj = quantize_and_free(w.up_proj, q);
  o.down_proj = quantize_and_free(w.down_proj, q);
}

void quantize_lm_head(ModelWeights& w, const ModelConfig& c) {
  const WeightQuantization per_channel{ops::QuantFormat::Int8, c.hidden_size};
  if (!w.lm_head.empty()) {
    w.lm_head_quantized = quantize_and_free(w.lm_head, per_channel);
  } else if (c.tie_word_embeddings && !w.embed_tokens.empty() && !w.norm.empty()) {  // the last stage's copy
    w.lm_head_quantized = ops::quantize_weight(w.embed_tokens.view(), per_channel.format, per_channel.group);
  }
}

int64_t resident_weight_bytes(const ModelWeights& w) {
  int64_t b = 0;
  auto dense = [&](const Tensor& t) { b += t.empty() ? 0 : static_cast<int64_t>(t.view().bytes()); };
  auto quantized = [&](const ops::QuantizedWeight& q) { b += q.empty() ? 0 : q.bytes(); };
  dense(w.embed_tokens), dense(w.norm), dense(w.lm_head), quantized(w.lm_head_quantized);
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.q_norm, &l.k_norm, &l.gate_proj,
                            &l.up_proj, &l.down_proj, &l.post_attention_layernorm, &l.post_feedforward_layernorm})
      dense(*t);
    const QuantizedLinears& q = l.quantized;
    for (const ops::QuantizedWeight* t : {&q.q_proj, &q.k_proj, &q.v_proj, &q.o_proj, &q.gate_proj, &q.up_proj,
                                          &q.down_proj})
      quantized(*t);
  }
  return b;
}

std::string quantization_text(const WeightQuantization& q) {
  return std::string(ops::quant_format_name(q.format)) + " (groups of " + std::to_string(q.group) +
         "; lm_head int8 per channel; quantized products " + ops::quantized_path_name(ops::quantized_path()) + ")";
}

}  // namespace olmo2
