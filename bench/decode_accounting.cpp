// Bytes per decode step and its time by kind of work (bench/decode_accounting.h).
#include "bench/decode_accounting.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "ops/dtype.h"

namespace olmo2::bench {
namespace {

double bytes_of(const Tensor& t) {
  return t.empty() ? 0.0 : static_cast<double>(t.numel()) * static_cast<double>(dtype_size(t.dtype()));
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

double weight_bytes_per_token(const Olmo2Model& model) {
  const ModelWeights& w = model.weights();
  double b = 0;
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.q_norm, &l.k_norm, &l.gate_proj,
                            &l.up_proj, &l.down_proj, &l.post_attention_layernorm, &l.post_feedforward_layernorm})
      b += bytes_of(*t);
    const QuantizedLinears& q = l.quantized;  // quantized weights: values and scales as held
    for (const ops::QuantizedWeight* t : {&q.q_proj, &q.k_proj, &q.v_proj, &q.o_proj, &q.gate_proj, &q.up_proj,
                                          &q.down_proj})
      b += static_cast<double>(t->bytes());
  }
  b += bytes_of(w.norm);
  const int64_t rows = w.embed_tokens.empty() ? 0 : w.embed_tokens.shape()[0];
  const double embed_row = rows > 0 ? bytes_of(w.embed_tokens) / static_cast<double>(rows) : 0.0;
  if (!w.lm_head_quantized.empty())  // the quantized lm_head (or tied copy) + one embedding row
    b += static_cast<double>(w.lm_head_quantized.bytes()) + embed_row;
  else
    b += !w.lm_head.empty() ? bytes_of(w.lm_head) + embed_row : bytes_of(w.embed_tokens);
  return b;
}

double kv_bytes_read(const Olmo2Model& model, const KVCache& cache, int64_t position) {
  const ModelConfig& c = model.config();
  const int64_t layers = static_cast<int64_t>(model.weights().layers.size());
  double b = 0;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t window = c.attention_window(model.shard().global_layer(l));
    const int64_t seen = window > 0 ? std::min(position + 1, window) : position + 1;
    for (const TensorView* pool : {&cache.keys(l), &cache.values(l)}) {
      const double row = static_cast<double>(pool->shape()[1]) * static_cast<double>(dtype_size(pool->dtype()));
      b += static_cast<double>(seen) * row;
    }
  }
  return b;
}

StepBreakdown classify(std::vector<ops::OpTime> profile, double total, double sampling) {
  StepBreakdown b;
  b.total = total;
  b.sampling = sampling;
  double in_ops = 0;
  for (const ops::OpTime& t : profile) {
    const std::string_view op = t.op;
    in_ops += t.seconds;
    if (starts_with(op, "linear")) b.products += t.seconds;
    else if (op.find("attention") != std::string_view::npos) b.attention += t.seconds;
    else if (starts_with(op, "rmsnorm") || starts_with(op, "rope") || op == "swiglu" || op == "add_inplace" ||
             op == "copy" || op == "fill" || op == "round_to" || op == "scale" || op == "gather_rows" ||
             op == "scatter_rows" || op == "sum_squares")
      b.elementwise += t.seconds;
    else b.other_ops += t.seconds;
  }
  b.outside = std::max(0.0, total - in_ops - sampling);
  b.ops = std::move(profile);
  return b;
}

std::string describe(const StepBreakdown& b, int64_t steps) {
  const double t = b.total > 0 ? b.total : 1;
  char line[512];
  std::snprintf(line, sizeof line,
                "products %.1f%%, attention %.1f%%, norms/rope/elementwise %.1f%%, other ops %.1f%%, sampling %.1f%%,"
                " outside ops %.1f%% of %.2f ms per step",
                100 * b.products / t, 100 * b.attention / t, 100 * b.elementwise / t, 100 * b.other_ops / t,
                100 * b.sampling / t, 100 * b.outside / t, 1e3 * b.total / static_cast<double>(std::max<int64_t>(1, steps)));
  std::string s = line;
  s += "; largest ops:";
  for (size_t i = 0; i < std::min<size_t>(3, b.ops.size()); ++i) {
    std::snprintf(line, sizeof line, "%s %s %.2f ms (%lld calls)", i ? "," : "", b.ops[i].op.c_str(),
                  1e3 * b.ops[i].seconds / static_cast<double>(std::max<int64_t>(1, steps)),
                  static_cast<long long>(b.ops[i].calls / std::max<int64_t>(1, steps)));
    s += line;
  }
  return s;
}

}  // namespace olmo2::bench
