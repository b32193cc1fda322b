// Collectives over whole tensors: the form model, training and serving code uses, so that
// the device and dtype of the tensor decide how it travels (docs/architecture.md §6).
// Each forwards to the typed Communicator call, which checks the view (dense, a device
// the communicator carries, the stream's device, equal dtypes) and names what it refuses.
// Without a stream, the call is ordered on the default stream of the view's device
// (ops/device_runtime.h default_stream: the CUDA compute stream for device views), so the same
// call site serves CPU and GPU tensors.
#pragma once

#include <optional>

#include "ops/device.h"
#include "ops/device_runtime.h"
#include "ops/tensor.h"
#include "parallel/communicator.h"

namespace olmo2::parallel {

/// In place: every element of `t` ← its sum over the ranks of `c`
/// (Communicator::all_reduce with ReduceOp::Sum). `t`: a dense view of any reducible
/// dtype (f32, bf16, f64, i32, i64, u8) on a device the communicator carries; ShapeError
/// otherwise.
inline void all_reduce_sum(Communicator& c, const TensorView& t, std::optional<Stream> stream = std::nullopt) {
  c.all_reduce(t, ReduceOp::Sum, stream.value_or(ops::default_stream(t.device())));
}

/// In place: every element ← its maximum over the ranks (ReduceOp::Max); as
/// all_reduce_sum.
inline void all_reduce_max(Communicator& c, const TensorView& t, std::optional<Stream> stream = std::nullopt) {
  c.all_reduce(t, ReduceOp::Max, stream.value_or(ops::default_stream(t.device())));
}

/// out = every rank's `in`, rank-major (out of size()·n elements for in of n; same
/// dtype); Communicator::all_gather.
inline void all_gather(Communicator& c, const TensorView& in, const TensorView& out,
                       std::optional<Stream> stream = std::nullopt) {
  c.all_gather(in, out, stream.value_or(ops::default_stream(in.device())));
}

/// Sends a dense view to group rank `peer` (Communicator::send).
inline void send(Communicator& c, const TensorView& t, int peer, int tag, std::optional<Stream> stream = std::nullopt) {
  c.send(t, peer, tag, stream.value_or(ops::default_stream(t.device())));
}

/// Receives exactly t.numel() elements of t.dtype() from group rank `peer`
/// (Communicator::recv).
inline void recv(Communicator& c, const TensorView& t, int peer, int tag, std::optional<Stream> stream = std::nullopt) {
  c.recv(t, peer, tag, stream.value_or(ops::default_stream(t.device())));
}

/// Sends `out` to and receives `in` from group rank `peer`, both posted at once (see
/// Communicator::send_recv); same dtype and device.
inline void send_recv(Communicator& c, const TensorView& out, const TensorView& in, int peer,
                      int send_tag, int recv_tag, std::optional<Stream> stream = std::nullopt) {
  c.send_recv(out, in, peer, send_tag, recv_tag, stream.value_or(ops::default_stream(out.device())));
}

}  // namespace olmo2::parallel
