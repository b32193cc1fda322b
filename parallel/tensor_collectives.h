// Collectives over whole tensors: the form model, training and serving code uses, so that
// the device and dtype of the tensor decide how it travels (docs/architecture.md §6).
#pragma once

#include <span>

#include "ops/tensor.h"
#include "parallel/communicator.h"

namespace olmo2::parallel {

/// In place: every element of `t` ← its sum over the ranks of `c`. `t`: a contiguous f32
/// view on a device the communicator carries. ShapeError otherwise.
inline void all_reduce_sum(Communicator& c, const TensorView& t) {
  OLMO2_CHECK(t.is_contiguous(), "all_reduce_sum of a non-contiguous view ", t.shape_str());
  c.all_reduce_sum(std::span<float>(t.f32(), static_cast<size_t>(t.numel())));
}

/// In place: every element ← its maximum over the ranks (contiguous f32 view).
inline void all_reduce_max(Communicator& c, const TensorView& t) {
  OLMO2_CHECK(t.is_contiguous(), "all_reduce_max of a non-contiguous view ", t.shape_str());
  c.all_reduce_max(std::span<float>(t.f32(), static_cast<size_t>(t.numel())));
}

/// out = every rank's `in`, rank-major (out [size·n] for in [n]); contiguous f32 views.
inline void all_gather(Communicator& c, const TensorView& in, const TensorView& out) {
  OLMO2_CHECK(in.is_contiguous() && out.is_contiguous(), "all_gather of non-contiguous views");
  c.all_gather(std::span<const float>(in.f32(), static_cast<size_t>(in.numel())),
               std::span<float>(out.f32(), static_cast<size_t>(out.numel())));
}

/// Sends / receives a contiguous f32 view to / from group rank `peer`.
inline void send(Communicator& c, const TensorView& t, int peer, int tag) {
  OLMO2_CHECK(t.is_contiguous(), "send of a non-contiguous view ", t.shape_str());
  c.send(std::span<const float>(t.f32(), static_cast<size_t>(t.numel())), peer, tag);
}
inline void recv(Communicator& c, const TensorView& t, int peer, int tag) {
  OLMO2_CHECK(t.is_contiguous(), "recv into a non-contiguous view ", t.shape_str());
  c.recv(std::span<float>(t.f32(), static_cast<size_t>(t.numel())), peer, tag);
}

/// Sends `out` to and receives `in` from group rank `peer`, both posted at once (see
/// Communicator::send_recv); contiguous f32 views.
inline void send_recv(Communicator& c, const TensorView& out, const TensorView& in, int peer, int send_tag,
                      int recv_tag) {
  OLMO2_CHECK(out.is_contiguous() && in.is_contiguous(), "send_recv of non-contiguous views");
  c.send_recv(std::span<const float>(out.f32(), static_cast<size_t>(out.numel())),
              std::span<float>(in.f32(), static_cast<size_t>(in.numel())), peer, send_tag, recv_tag);
}

}  // namespace olmo2::parallel
