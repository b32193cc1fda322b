#include "runtime/model/model.h"

#include <cstring>

#include "core/hash.h"
#include "ops/tensor_ops.h"
#include "runtime/model/init.h"
#include "runtime/io/safetensors.h"

namespace olmo2 {

Olmo2Model Olmo2Model::load(const std::string& dir) {
  const ModelConfig c = ModelConfig::load(dir);
  return load(dir, ShardSpec::whole(c));
}

namespace {
/// `host` on `device`: itself on the CPU, else a device copy (the host tensor is freed
/// on return, so one tensor at a time is held twice while loading).
Tensor on_device(Tensor host, Device device) {
  if (device == Device::CPU) return host;
  Tensor d = Tensor::zeros(host.shape(), host.dtype(), device);
  ops::copy(host.view(), d.view());
  return d;
}
}  // namespace

namespace {
/// The refusals of quantized weights before anything is read (docs/architecture.md §3.2
/// "Quantized weights").
void check_quantizable(const ModelConfig& c, const ShardSpec& shard, Device device, const WeightQuantization& q) {
  if (device != Device::CPU) {
    OLMO2_THROW(InputError, "quantized weights run on the CPU only; the GPU path does not have them yet");
  }
  check_quantization(c, shard, q);
}
}  // namespace

void Olmo2Model::quantize(const WeightQuantization& given) {
  if (quantization_) OLMO2_THROW(InputError, "the model's weights are already quantized");
  check_quantizable(config_, shard_, device_, given);
  const WeightQuantization q = resolved(given, config_);
  for (LayerWeights& lw : weights_.layers) quantize_layer(lw, q);
  if (shard_.final_norm) quantize_lm_head(weights_, config_);
  quantization_ = q;
}

Olmo2Model Olmo2Model::load(const std::string& dir, const ShardSpec& shard, std::optional<Precision> precision,
                            Device device, std::optional<WeightQuantization> quantization) {
  Olmo2Model m;
  m.config_ = ModelConfig::load(dir);
  m.shard_ = shard;
  m.device_ = device;
  const ModelConfig& c = m.config_;
  if (quantization) {
    check_quantizable(c, shard, device, *quantization);
    quantization = resolved(*quantization, c);
  }
  m.quantization_ = quantization;
  m.precision_ = precision.value_or(default_precision(c.dtype));
  const DType wt = weight_dtype(m.precision_);
  const Checkpoint ckpt = Checkpoint::open(dir);
  // Each tensor is copied out in the weight dtype (and on to the device), then its pages
  // of the mapping are dropped: the model is resident once.
  auto slice = [&](const std::string& name, std::vector<int64_t> full, int dim, int64_t b, int64_t e) {
    Tensor t = on_device(ckpt.load_slice(name, full, dim, b, e, wt), device);
    ckpt.release(name);
    return t;
  };
  auto whole = [&](const std::string& name, std::vector<int64_t> full) {
    Tensor t = on_device(ckpt.load(name, full, wt), device);
    ckpt.release(name);
    return t;
  };
  const int64_t h = c.hidden_size, hd = c.head_dim, q = c.num_attention_heads * hd,
                kv = c.num_key_value_heads * hd, inter = c.intermediate_size;
  const int64_t qb = shard.q_heads.begin * hd, qe = shard.q_heads.end * hd;
  const int64_t kb = shard.kv_heads.begin * hd, ke = shard.kv_heads.end * hd;
  const int64_t ib = shard.mlp_rows.begin, ie = shard.mlp_rows.end;
  // Vocab rows: the real rows of this rank's slice, zero rows for padding.
  auto vocab_slice = [&](const std::string& name) {
    if (shard.vocab_real == shard.vocab_rows) {  // no padding rows: no second copy
      return slice(name, {c.vocab_size, h}, 0, shard.vocab_rows.begin, shard.vocab_rows.end);
    }
    Tensor t = Tensor::zeros({shard.vocab_rows.size(), h}, wt, device);
    if (shard.vocab_real.size() > 0) {
      // Read on the host and copied into the (device) rows: no second device copy.
      const Tensor real = ckpt.load_slice(name, {c.vocab_size, h}, 0, shard.vocab_real.begin, shard.vocab_real.end, wt);
      ckpt.release(name);
      const int64_t first = shard.vocab_real.begin - shard.vocab_rows.begin;
      ops::copy(real.view(), t.view().rows(first, first + shard.vocab_real.size()));
    }
    return t;
  };
  ModelWeights& w = m.weights_;
  if (shard.embedding || (shard.final_norm && c.tie_word_embeddings)) {
    w.embed_tokens = vocab_slice("model.embed_tokens.weight");
  }
  for (int64_t i = 0; i < shard.layer_count(); ++i) {
    const std::string p = "model.layers." + std::to_string(shard.global_layer(i)) + ".";
    LayerWeights lw;
    lw.q_proj = slice(p + "self_attn.q_proj.weight", {q, h}, 0, qb, qe);
    lw.k_proj = slice(p + "self_attn.k_proj.weight", {kv, h}, 0, kb, ke);
    lw.v_proj = slice(p + "self_attn.v_proj.weight", {kv, h}, 0, kb, ke);
    lw.o_proj = slice(p + "self_attn.o_proj.weight", {h, q}, 1, qb, qe);
    lw.q_norm = slice(p + "self_attn.q_norm.weight", {q}, 0, qb, qe);
    lw.k_norm = slice(p + "self_attn.k_norm.weight", {kv}, 0, kb, ke);
    lw.gate_proj = slice(p + "mlp.gate_proj.weight", {inter, h}, 0, ib, ie);
    lw.up_proj = slice(p + "mlp.up_proj.weight", {inter, h}, 0, ib, ie);
    lw.down_proj = slice(p + "mlp.down_proj.weight", {h, inter}, 1, ib, ie);
    lw.post_attention_layernorm = whole(p + "post_attention_layernorm.weight", {h});
    lw.post_feedforward_layernorm = whole(p + "post_feedforward_layernorm.weight", {h});
    if (quantization) quantize_layer(lw, *quantization);  // its dense weights freed before the next layer
    w.layers.push_back(std::move(lw));
  }
  if (shard.final_norm) {
    w.norm = whole("model.norm.weight", {h});
    if (!c.tie_word_embeddings) w.lm_head = vocab_slice("lm_head.weight");
    if (quantization) quantize_lm_head(w, c);
  }
  return m;
}

Olmo2Model Olmo2Model::from_weights(const ModelConfig& config, const ShardSpec& shard, ModelWeights weights,
                                    Precision precision) {
  Olmo2Model m;
  m.precision_ = precision;
  m.config_ = config;
  m.shard_ = shard;
  m.weights_ = std::move(weights);
  m.device_ = weights_device(m.weights_);
  return m;
}

Olmo2Model Olmo2Model::random(const ModelConfig& c, uint64_t seed, float std, Precision precision) {
  Olmo2Model m;
  m.config_ = c;
  m.shard_ = ShardSpec::whole(c);
  m.precision_ = precision;
  const DType wt = weight_dtype(precision);
  // Tensor k (in the order below) holds the stream splitmix64_mix(seed + k·golden), made
  // in f32 and held in the weight dtype (one tensor in f32 at a time).
  uint64_t tensors = 0;
  auto normal = [&](std::vector<int64_t> shape) {
    Tensor t = Tensor::zeros(std::move(shape));
    fill_normal(t.f32(), t.numel(), splitmix64_mix(seed + (++tensors) * 0x9e3779b97f4a7c15ull), std);
    if (wt == DType::F32) return t;
    Tensor narrow = Tensor::zeros(t.shape(), wt);
    ops::copy(t.view(), narrow.view());
    return narrow;
  };
  auto ones = [&](int64_t n) {
    Tensor t = Tensor::zeros({n}, wt);
    ops::fill(t.view(), 1.0);
    return t;
  };
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, inter = c.intermediate_size;
  ModelWeights& w = m.weights_;
  w.embed_tokens = normal({c.vocab_size, h});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights lw{normal({q, h}), normal({kv, h}), normal({kv, h}), normal({h, q}),
                    ones(q), ones(kv), normal({inter, h}), normal({inter, h}),
                    normal({h, inter}), ones(h), ones(h), {}};
    w.layers.push_back(std::move(lw));
  }
  w.norm = ones(h);
  if (!c.tie_word_embeddings) w.lm_head = normal({c.vocab_size, h});
  return m;
}

double Olmo2Model::forward_flops(int64_t tokens, double context) const {
  const ModelConfig& c = config_;
  const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.num_attention_heads * c.head_dim),
               kv = static_cast<double>(c.num_key_value_heads * c.head_dim),
               inter = static_cast<double>(c.intermediate_size);
  const double matmul_params = c.num_hidden_layers * (2 * h * q + 2 * h * kv + 3 * h * inter) +
                               static_cast<double>(c.vocab_size) * h;
  const double attention = c.num_hidden_layers * 4.0 * context * q;
  return static_cast<double>(tokens) * (2.0 * matmul_params + attention);
}

}  // namespace olmo2
