#include "runtime/train/sharded_state.h"

#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

namespace olmo2 {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

/// Calls f(local_offset, full_offset, count) for every contiguous run of `p`'s local
/// elements that exists in the whole tensor (padding rows skipped).
template <typename F>
void for_each_run(const Parameter& p, const std::vector<int64_t>& local_shape, F&& f) {
  const int64_t local_n = numel_of(local_shape);
  if (p.shard_dim < 0) {
    if (local_shape != p.full_shape) {
      OLMO2_THROW(ShapeError, p.name, ": local shape ", shape_to_string(local_shape), " != full ",
                  shape_to_string(p.full_shape));
    }
    f(0, 0, local_n);
    return;
  }
  const int64_t cols = p.full_shape.size() == 2 ? p.full_shape[1] : 1;
  if (p.shard_dim == 0) {
    const int64_t rows = local_n / cols;
    const int64_t real = std::max<int64_t>(0, std::min(rows, p.full_shape[0] - p.shard_begin));
    if (real > 0) f(0, p.shard_begin * cols, real * cols);
    return;
  }
  // shard_dim 1: columns [begin, end) of every row.
  const int64_t rows = p.full_shape[0], width = p.shard_end - p.shard_begin;
  if (local_n != rows * width) {
    OLMO2_THROW(ShapeError, p.name, ": local shape ", shape_to_string(local_shape), " is not ", rows, " rows of ",
                width, " columns");
  }
  for (int64_t r = 0; r < rows; ++r) f(r * width, r * cols + p.shard_begin, width);
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
  std::memset(local.f32(), 0, static_cast<size_t>(local.bytes()));
  for_each_run(p, local.shape(), [&](int64_t lo, int64_t fo, int64_t n) {
    std::memcpy(local.f32() + lo, full.f32() + fo, sizeof(float) * static_cast<size_t>(n));
  });
}

void copy_to_full(const Parameter& p, const TensorView& local, const TensorView& full) {
  check_full(p, full);
  for_each_run(p, local.shape(), [&](int64_t lo, int64_t fo, int64_t n) {
    std::memcpy(full.f32() + fo, local.f32() + lo, sizeof(float) * static_cast<size_t>(n));
  });
}

std::vector<std::pair<std::string, Tensor>> gather_whole_tensors(const std::vector<SliceToGather>& slices,
                                                                 bool contribute, parallel::Communicator& world,
                                                                 int root) {
  constexpr int kHeaderTag = 21, kDataTag = 22;
  // Who sends: every rank tells root whether it contributes (one u8 each).
  std::vector<uint8_t> mine{static_cast<uint8_t>(contribute ? 1 : 0)}, who(static_cast<size_t>(world.size()));
  world.all_gather(mine, who);
  std::vector<std::pair<std::string, Tensor>> out;
  std::map<std::string, size_t> index;
  auto place = [&](const std::string& name, const Parameter& p, const float* data) {
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
    const std::vector<int64_t> local_shape = p.value->shape();
    for_each_run(p, local_shape, [&](int64_t lo, int64_t fo, int64_t n) {
      std::memcpy(full.f32() + fo, data + lo, sizeof(float) * static_cast<size_t>(n));
    });
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
      world.send(std::span<const float>(s.data, static_cast<size_t>(s.param->numel())), root, kDataTag);
    }
    return out;
  }
  if (contribute) {
    for (const SliceToGather& s : slices) place(s.name, *s.param, s.data);
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
      world.recv(std::span<float>(local.f32(), static_cast<size_t>(local.numel())), r, kDataTag);
      place(p.name, p, local.f32());
    }
  }
  return out;
}

}  // namespace olmo2
