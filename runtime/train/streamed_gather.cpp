#include "runtime/train/streamed_gather.h"

#include <exception>
#include <span>

#include <nlohmann/json.hpp>

#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"
#include "runtime/train/sharded_state.h"

namespace olmo2 {
namespace {
constexpr int kLayoutTag = 24, kDataTag = 25, kReadyTag = 27;
// Root tells a sender it is ready for its slice before the slice travels: a sender that
// waited long for its turn polls slowly (MpiCommunicator::wait sleeps 500 µs between
// polls after 1 s), and a large message moves only as fast as both sides poll.
const uint8_t kReady = 1;

/// A zeroed f32 view of `shape` in `buf`, grown when too small: reusing one buffer for
/// every tensor spares the page faults of a fresh allocation each time.
TensorView zeroed(Buffer& buf, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (buf.bytes() < bytes) buf = Buffer(bytes);
  const TensorView v(buf.data(), DType::F32, shape);
  ops::fill(v, 0.0);
  return v;
}
}  // namespace

std::map<std::string, std::vector<SlicePiece>> gather_slice_layouts(const std::vector<StreamedSlice>& slices,
                                                                    bool contribute, parallel::Communicator& world,
                                                                    int root) {
  std::vector<uint8_t> mine{static_cast<uint8_t>(contribute ? 1 : 0)}, who(static_cast<size_t>(world.size()));
  world.all_gather(mine, who);
  auto header_of = [&] {
    nlohmann::json header = nlohmann::json::array();
    for (const StreamedSlice& s : slices) {
      const Parameter& p = *s.param;
      header.push_back({s.name, p.full_shape, p.value->shape(), p.shard_dim, p.shard_begin, p.shard_end});
    }
    return header.dump();
  };
  std::map<std::string, std::vector<SlicePiece>> out;
  if (world.rank() != root) {
    if (!contribute) return out;
    const std::string text = header_of();
    const uint64_t size = text.size();
    world.send(std::span<const uint64_t>(&size, 1), root, kLayoutTag);
    world.send(std::as_bytes(std::span<const char>(text.data(), text.size())), root, kLayoutTag);
    return out;
  }
  for (int r = 0; r < world.size(); ++r) {
    if (who[static_cast<size_t>(r)] == 0) continue;
    std::string text;
    if (r == root) {
      text = header_of();
    } else {
      uint64_t size = 0;
      world.recv(std::span<uint64_t>(&size, 1), r, kLayoutTag);
      text.assign(size, '\0');
      world.recv(std::as_writable_bytes(std::span<char>(text.data(), text.size())), r, kLayoutTag);
    }
    for (const nlohmann::json& e : nlohmann::json::parse(text)) {
      out[e.at(0).get<std::string>()].push_back({r, e.at(1).get<std::vector<int64_t>>(),
                                                 e.at(2).get<std::vector<int64_t>>(), e.at(3).get<int>(),
                                                 e.at(4).get<int64_t>(), e.at(5).get<int64_t>()});
    }
  }
  return out;
}

std::vector<int64_t> whole_shape(const std::string& name, const std::vector<SlicePiece>& pieces) {
  if (pieces.empty()) OLMO2_THROW(Error, "checkpoint gather: no rank sent ", name);
  for (const SlicePiece& p : pieces) {
    if (p.full_shape != pieces.front().full_shape) {
      OLMO2_THROW(Error, "checkpoint gather of ", name, ": ranks ", pieces.front().rank, " and ", p.rank,
                  " disagree on its shape (", shape_to_string(pieces.front().full_shape), " vs ",
                  shape_to_string(p.full_shape), ")");
    }
  }
  return pieces.front().full_shape;
}

void stream_whole_tensors(const std::vector<std::string>& order, const std::vector<StreamedSlice>& slices,
                          bool contribute, const std::map<std::string, std::vector<SlicePiece>>& layouts,
                          parallel::Communicator& world, int root,
                          const std::function<void(const std::string&, const TensorView&)>& consume) {
  std::map<std::string, const StreamedSlice*> mine;
  for (const StreamedSlice& s : slices) mine.emplace(s.name, &s);
  std::exception_ptr failed;
  auto guarded = [&](const std::function<void()>& fn) {  // root: hold the first error, go on receiving
    if (failed) return;
    try {
      fn();
    } catch (...) {
      failed = std::current_exception();
    }
  };
  Buffer whole_buf, local_buf;  // root: one whole tensor and one received slice
  for (const std::string& name : order) {
    const auto it = mine.find(name);
    Tensor keep, staged;
    TensorView data;
    if (it != mine.end()) data = it->second->data(keep);
    if (world.rank() != root) {
      if (it == mine.end() || !contribute) continue;
      if (data.device() != Device::CPU) {  // the world communicator carries host memory
        staged = Tensor::zeros(data.shape(), data.dtype());
        ops::copy(data, staged.view());
        data = staged.view();
      }
      uint8_t ready = 0;
      world.recv(std::span<uint8_t>(&ready, 1), root, kReadyTag);
      parallel::send(world, data, root, kDataTag);
      continue;
    }
    const std::vector<SlicePiece>& pieces = layouts.at(name);
    const TensorView whole = zeroed(whole_buf, whole_shape(name, pieces));
    for (const SlicePiece& piece : pieces) {
      Parameter p;  // the piece's sharding, for copy_to_full
      Tensor local;
      p.name = name, p.full_shape = piece.full_shape, p.value = &local;
      p.shard_dim = piece.shard_dim, p.shard_begin = piece.shard_begin, p.shard_end = piece.shard_end;
      if (piece.rank == root) {
        guarded([&] {
          if (data.device() != Device::CPU) {
            local = Tensor::zeros(data.shape(), data.dtype());
            ops::copy(data, local.view());
          }
          copy_to_full(p, data.device() != Device::CPU ? local.view() : data, whole);
        });
        continue;
      }
      const TensorView received = zeroed(local_buf, piece.local_shape);
      world.send(std::span<const uint8_t>(&kReady, 1), piece.rank, kReadyTag);
      parallel::recv(world, received, piece.rank, kDataTag);
      guarded([&] { copy_to_full(p, received, whole); });
    }
    guarded([&] { consume(name, whole); });
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace olmo2
