#include "runtime/model/weights.h"

#include <optional>

#include "core/error.h"
#include "ops/tensor_ops.h"

namespace olmo2 {
namespace {
/// Calls fn(a, b) for every pair of tensors at the same place in two weight sets.
template <typename A, typename B, typename Fn>
void for_each_pair(A& a, B& b, Fn&& fn) {
  OLMO2_CHECK(a.layers.size() == b.layers.size(), "weight sets of ", a.layers.size(), " and ", b.layers.size(),
              " layers");
  fn(a.embed_tokens, b.embed_tokens);
  for (size_t l = 0; l < a.layers.size(); ++l) {
    auto& x = a.layers[l];
    auto& y = b.layers[l];
    fn(x.q_proj, y.q_proj), fn(x.k_proj, y.k_proj), fn(x.v_proj, y.v_proj), fn(x.o_proj, y.o_proj);
    fn(x.q_norm, y.q_norm), fn(x.k_norm, y.k_norm);
    fn(x.gate_proj, y.gate_proj), fn(x.up_proj, y.up_proj), fn(x.down_proj, y.down_proj);
    fn(x.post_attention_layernorm, y.post_attention_layernorm);
    fn(x.post_feedforward_layernorm, y.post_feedforward_layernorm);
  }
  fn(a.norm, b.norm);
  fn(a.lm_head, b.lm_head);
}
}  // namespace

Device weights_device(const ModelWeights& w) {
  std::optional<Device> found;
  ModelWeights none;
  none.layers.resize(w.layers.size());
  for_each_pair(w, none, [&](const Tensor& t, Tensor&) {
    if (!found && !t.empty()) found = t.device();
  });
  return found.value_or(Device::CPU);
}

ModelWeights weights_in(const ModelWeights& w, DType dtype) {
  ModelWeights out;
  out.layers.resize(w.layers.size());
  for_each_pair(w, out, [&](const Tensor& src, Tensor& dst) {
    if (src.empty() || src.numel() == 0) return;
    dst = Tensor::zeros(src.shape(), dtype, src.device());
    ops::copy(src.view(), dst.view());
  });
  return out;
}

ModelWeights weights_on(const ModelWeights& w, Device device) {
  ModelWeights out;
  out.layers.resize(w.layers.size());
  for_each_pair(w, out, [&](const Tensor& src, Tensor& dst) {
    if (src.empty() || src.numel() == 0) return;
    dst = Tensor::zeros(src.shape(), src.dtype(), device);
    ops::copy(src.view(), dst.view());
  });
  return out;
}

void copy_weights(const ModelWeights& src, ModelWeights& dst) {
  for_each_pair(src, dst, [&](const Tensor& s, Tensor& d) {
    // A tensor this rank does not hold (a pipeline stage's embedding or lm_head, a tied
    // lm_head) is empty on both sides; an empty tensor's shape {} still counts 1 element.
    OLMO2_CHECK(s.empty() == d.empty() && s.shape() == d.shape(), "weights of shape ",
                s.empty() ? "(none)" : shape_to_string(s.shape()), " into ",
                d.empty() ? "(none)" : shape_to_string(d.shape()));
    if (!s.empty() && s.numel() > 0) ops::copy(s.view(), d.view());
  });
}

}  // namespace olmo2
