#include "runtime/train/sharded_state.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"

namespace olmo2 {
namespace {

/// The region of `local` that exists in the whole tensor and where it lies in `full`:
/// everything (not sharded), the real rows (sharded by rows; vocab padding rows past
/// the whole tensor's end dropped), or the shard's columns (sharded by columns).
std::pair<TensorView, TensorView> matching_regions(const Parameter& p, const TensorView& local,
                                                   const TensorView& full) {
  if (p.shard_dim < 0) {
    if (local.shape() != p.full_shape) {
      OLMO2_THROW(ShapeError, p.name, ": local shape ", local.shape_str(), " != full ", shape_to_string(p.full_shape));
    }
    return {local, full};
  }
  if (p.shard_dim == 0) {
    const int64_t real = std::max<int64_t>(0, std::min(local.size(0), p.full_shape[0] - p.shard_begin));
    if (local.dim() != full.dim() || (local.dim() == 2 && local.size(1) != full.size(1))) {
      OLMO2_THROW(ShapeError, p.name, ": local shape ", local.shape_str(), " is not rows of ", full.shape_str());
    }
    return {local.rows(0, real), full.rows(p.shard_begin, p.shard_begin + real)};
  }
  const int64_t rows = p.full_shape[0], width = p.shard_end - p.shard_begin;  // shard_dim 1: columns
  if (local.shape() != std::vector<int64_t>{rows, width}) {
    OLMO2_THROW(ShapeError, p.name, ": local shape ", local.shape_str(), " is not ", rows, " rows of ", width,
                " columns");
  }
  return {local, full.cols(p.shard_begin, p.shard_end)};
}

void check_full(const Parameter& p, const TensorView& full) {
  if (full.shape() != p.full_shape || full.dtype() != DType::F32) {
    OLMO2_THROW(ShapeError, p.name, ": whole tensor has shape ", shape_to_string(full.shape()), ", expected ",
                shape_to_string(p.full_shape), " f32");
  }
}

}  // namespace

std::vector<std::string> parameter_names(const ModelConfig& c) {
  std::vector<std::string> out{"model.embed_tokens.weight"};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                          "post_attention_layernorm", "post_feedforward_layernorm"}) {
      out.push_back(p + n + ".weight");
    }
  }
  out.push_back("model.norm.weight");
  if (!c.tie_word_embeddings) out.push_back("lm_head.weight");
  return out;
}

void copy_from_full(const Parameter& p, const TensorView& full, const TensorView& local) {
  check_full(p, full);
  ops::fill(local, 0.0);  // vocab padding rows stay zero
  const auto [mine, whole] = matching_regions(p, local, full);
  ops::copy(whole, mine);
}

void copy_to_full(const Parameter& p, const TensorView& local, const TensorView& full) {
  check_full(p, full);
  const auto [mine, whole] = matching_regions(p, local, full);
  ops::copy(mine, whole);
}

namespace {
/// `v` itself on the host, else a host copy of it held in `keep` (a device slice is
/// staged one tensor at a time, never the whole state at once).
TensorView on_host(const TensorView& v, Tensor& keep) {
  if (v.device() == Device::CPU) return v;
  keep = Tensor::zeros(v.shape(), v.dtype());
  ops::copy(v, keep.view());
  return keep.view();
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> gather_whole_tensors(const std::vector<SliceToGather>& slices,
                                                                 bool contribute, parallel::Communicator& world,
                                                                 int root) {
  constexpr int kHeaderTag = 21, kDataTag = 22;
  // Who sends: every rank tells root whether it contributes (one u8 each).
  std::vector<uint8_t> mine{static_cast<uint8_t>(contribute ? 1 : 0)}, who(static_cast<size_t>(world.size()));
  world.all_gather(mine, who);
  std::vector<std::pair<std::string, Tensor>> out;
  std::map<std::string, size_t> index;
  auto place = [&](const std::string& name, const Parameter& p, const TensorView& data) {
    auto it = index.find(name);
    if (it == index.end()) {
      it = index.emplace(name, out.size()).first;
      out.emplace_back(name, Tensor::zeros(p.full_shape));
    }
    Tensor& full = out[it->second].second;
    if (full.shape() != p.full_shape) {
      OLMO2_THROW(Error, "gather of ", name, ": ranks disagree on its shape (", shape_to_string(full.shape()),
                  " vs ", shape_to_string(p.full_shape), ")");
    }
    copy_to_full(p, data, full.view());
  };
  if (world.rank() != root) {
    if (!contribute) return out;
    nlohmann::json header = nlohmann::json::array();
    for (const SliceToGather& s : slices) {
      const Parameter& p = *s.param;
      header.push_back({s.name, p.full_shape, p.value->shape(), p.shard_dim, p.shard_begin, p.shard_end});
    }
    const std::string text = header.dump();
    const uint64_t size = text.size();
    world.send(std::span<const uint64_t>(&size, 1), root, kHeaderTag);
    world.send(std::as_bytes(std::span<const char>(text.data(), text.size())), root, kHeaderTag);
    for (const SliceToGather& s : slices) {
      Tensor staged;
      parallel::send(world, on_host(s.data, staged), root, kDataTag);
    }
    return out;
  }
  if (contribute) {
    for (const SliceToGather& s : slices) {
      Tensor staged;
      place(s.name, *s.param, on_host(s.data, staged));
    }
  }
  for (int r = 0; r < world.size(); ++r) {
    if (r == root || who[static_cast<size_t>(r)] == 0) continue;
    uint64_t size = 0;
    world.recv(std::span<uint64_t>(&size, 1), r, kHeaderTag);
    std::string text(size, '\0');
    world.recv(std::as_writable_bytes(std::span<char>(text.data(), text.size())), r, kHeaderTag);
    for (const nlohmann::json& e : nlohmann::json::parse(text)) {
      Tensor local = Tensor::zeros(e.at(2).get<std::vector<int64_t>>());
      Parameter p;
      p.name = e.at(0).get<std::string>();
      p.full_shape = e.at(1).get<std::vector<int64_t>>();
      p.value = &local;
      p.shard_dim = e.at(3).get<int>(), p.shard_begin = e.at(4).get<int64_t>(), p.shard_end = e.at(5).get<int64_t>();
      parallel::recv(world, local.view(), r, kDataTag);
      place(p.name, p, local.view());
    }
  }
  return out;
}

}  // namespace olmo2
