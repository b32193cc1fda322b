// Collectives over whole tensors: the form model, training and serving code uses, so that
// the device and dtype of the tensor decide how it travels (docs/architecture.md §6).
// Each forwards to the typed Communicator call, which checks the view (dense, a device
// the communicator carries, the stream's device, equal dtypes) and names what it refuses.
#pragma once

#include "ops/device.h"
#include "ops/tensor.h"
#include "parallel/communicator.h"

namespace olmo2::parallel {

/// In place: every element of `t` ← its sum over the ranks of `c`
/// (Communicator::all_reduce with ReduceOp::Sum). `t`: a dense view of any reducible
/// dtype (f32, bf16, f64, i32, i64, u8) on a device the communicator carries; ShapeError
/// otherwise.
inline void all_reduce_sum(Communicator& c, const TensorView& t, Stream stream = {}) {
  c.all_reduce(t, ReduceOp::Sum, stream);
}

/// In place: every element ← its maximum over the ranks (ReduceOp::Max); as
/// all_reduce_sum.
inline void all_reduce_max(Communicator& c, const TensorView& t, Stream stream = {}) {
  c.all_reduce(t, ReduceOp::Max, stream);
}

/// out = every rank's `in`, rank-major (out of size()·n elements for in of n; same
/// dtype); Communicator::all_gather.
inline void all_gather(Communicator& c, const TensorView& in, const TensorView& out,
                       Stream stream = {}) {
  c.all_gather(in, out, stream);
}

/// Sends a dense view to group rank `peer` (Communicator::send).
inline void send(Communicator& c, const TensorView& t, int peer, int tag, Stream stream = {}) {
  c.send(t, peer, tag, stream);
}

/// Receives exactly t.numel() elements of t.dtype() from group rank `peer`
/// (Communicator::recv).
inline void recv(Communicator& c, const TensorView& t, int peer, int tag, Stream stream = {}) {
  c.recv(t, peer, tag, stream);
}

/// Sends `out` to and receives `in` from group rank `peer`, both posted at once (see
/// Communicator::send_recv); same dtype and device.
inline void send_recv(Communicator& c, const TensorView& out, const TensorView& in, int peer,
                      int send_tag, int recv_tag, Stream stream = {}) {
  c.send_recv(out, in, peer, send_tag, recv_tag, stream);
}

}  // namespace olmo2::parallel
