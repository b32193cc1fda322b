#include "parallel/host_staged_communicator.h"

#include "core/error.h"
#include "ops/tensor_ops.h"

namespace olmo2::parallel {

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {
  if (!inner_) OLMO2_THROW(Error, "HostStagedCommunicator: null communicator");
}

void HostStagedCommunicator::wait_pending() {
  inner_->wait_pending();
  pending_buffers_.clear();  // the operation that used them is complete
}

template <typename Fn>
void HostStagedCommunicator::staged(const TensorView* in, const TensorView* out, Fn&& fn) {
  Tensor host_in, host_out;
  if (in) {
    host_in = Tensor::zeros(in->shape(), in->dtype());
    ops::copy(*in, host_in.view());
  }
  if (out) host_out = Tensor::zeros(out->shape(), out->dtype());
  try {
    fn(host_in.view(), host_out.view());
  } catch (const CollectiveTimeout&) {
    pending_buffers_.push_back(std::move(host_in)), pending_buffers_.push_back(std::move(host_out));
    throw;
  }
  if (out) ops::copy(host_out.view(), *out);
}

void HostStagedCommunicator::do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) {
  if (data.device() == Device::CPU) return inner_->all_reduce(data, op, stream);
  // In place: the staged input is the output.
  Tensor host = Tensor::zeros(data.shape(), data.dtype());
  ops::copy(data, host.view());
  try {
    inner_->all_reduce(host.view(), op, Stream{});
  } catch (const CollectiveTimeout&) {
    pending_buffers_.push_back(std::move(host));
    throw;
  }
  ops::copy(host.view(), data);
}

void HostStagedCommunicator::do_all_gather(const TensorView& in, const TensorView& out, Stream stream) {
  if (in.device() == Device::CPU) return inner_->all_gather(in, out, stream);
  staged(&in, &out, [&](const TensorView& i, const TensorView& o) { inner_->all_gather(i, o, Stream{}); });
}

void HostStagedCommunicator::do_reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                                               Stream stream) {
  if (in.device() == Device::CPU) return inner_->reduce_scatter(in, out, op, stream);
  staged(&in, &out, [&](const TensorView& i, const TensorView& o) { inner_->reduce_scatter(i, o, op, Stream{}); });
}

void HostStagedCommunicator::do_broadcast(const TensorView& data, int root, Stream stream) {
  if (data.device() == Device::CPU) return inner_->broadcast(data, root, stream);
  Tensor host = Tensor::zeros(data.shape(), data.dtype());
  if (rank() == root) ops::copy(data, host.view());
  try {
    inner_->broadcast(host.view(), root, Stream{});
  } catch (const CollectiveTimeout&) {
    pending_buffers_.push_back(std::move(host));
    throw;
  }
  if (rank() != root) ops::copy(host.view(), data);
}

void HostStagedCommunicator::do_send(const TensorView& data, int peer, int tag, Stream stream) {
  if (data.device() == Device::CPU) return inner_->send(data, peer, tag, stream);
  staged(&data, nullptr, [&](const TensorView& i, const TensorView&) { inner_->send(i, peer, tag, Stream{}); });
}

void HostStagedCommunicator::do_recv(const TensorView& data, int peer, int tag, Stream stream) {
  if (data.device() == Device::CPU) return inner_->recv(data, peer, tag, stream);
  staged(nullptr, &data, [&](const TensorView&, const TensorView& o) { inner_->recv(o, peer, tag, Stream{}); });
}

void HostStagedCommunicator::do_send_recv(const TensorView& out, const TensorView& in, int peer, int send_tag,
                                          int recv_tag, Stream stream) {
  if (out.device() == Device::CPU) return inner_->send_recv(out, in, peer, send_tag, recv_tag, stream);
  // `out` is sent (staged in), `in` is received (staged out).
  staged(&out, &in, [&](const TensorView& o, const TensorView& i) {
    inner_->send_recv(o, i, peer, send_tag, recv_tag, Stream{});
  });
}

}  // namespace olmo2::parallel
