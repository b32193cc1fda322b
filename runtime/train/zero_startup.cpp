#include "runtime/train/zero_startup.h"

#include <algorithm>

#include "ops/tensor_ops.h"

namespace olmo2 {

Tensor shape_only(const std::vector<int64_t>& shape, DType dtype, Device device) {
  Tensor t;
  t.view() = TensorView(nullptr, dtype, shape, device);
  return t;
}

ModelWeights shape_only_weights(const ModelConfig& config, const ShardSpec& shard, DType dtype, Device device) {
  // zero_weights of a shard holding one unit, each of its tensors replaced by its shape.
  auto unit = [&](bool embedding, parallel::Range layers, bool final_norm) {
    ShardSpec one = shard;
    one.embedding = embedding, one.chunks = {layers}, one.final_norm = final_norm;
    ModelWeights w = zero_weights(config, one, device);
    for (const Parameter& p : list_parameters(w, w, config, one)) *p.value = shape_only(p.value->shape(), dtype, device);
    return w;
  };
  ModelWeights out;
  if (shard.embedding) out.embed_tokens = std::move(unit(true, {0, 0}, false).embed_tokens);
  for (int64_t i = 0; i < shard.layer_count(); ++i) {
    const int64_t l = shard.global_layer(i);
    out.layers.push_back(std::move(unit(false, {l, l + 1}, false).layers.front()));
  }
  if (shard.final_norm) {
    ModelWeights tail = unit(false, {0, 0}, true);
    out.norm = std::move(tail.norm), out.lm_head = std::move(tail.lm_head);
  }
  return out;
}

void load_parameter(const Checkpoint& checkpoint, const Parameter& p) {
  if (p.shard_dim < 0) {
    ops::copy(checkpoint.load(p.name, p.full_shape, DType::F32).view(), p.value->view());
    checkpoint.release(p.name);
    return;
  }
  // Rows past the whole tensor's end are vocab padding: zeros, not read.
  const int64_t end = std::min(p.shard_end, p.full_shape[static_cast<size_t>(p.shard_dim)]);
  const int64_t real = std::max<int64_t>(0, end - p.shard_begin);
  if (p.shard_dim != 0 || real == p.shard_end - p.shard_begin) {
    ops::copy(checkpoint.load_slice(p.name, p.full_shape, p.shard_dim, p.shard_begin, end, DType::F32).view(),
              p.value->view());
    checkpoint.release(p.name);
    return;
  }
  Tensor host = Tensor::zeros(p.value->shape());
  if (real > 0) {
    ops::copy(checkpoint.load_slice(p.name, p.full_shape, 0, p.shard_begin, end, DType::F32).view(),
              host.view().rows(0, real));
    checkpoint.release(p.name);
  }
  ops::copy(host.view(), p.value->view());
}

}  // namespace olmo2
