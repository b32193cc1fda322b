// EmulatedDeviceCommunicator (parallel/emulated_device_communicator.h;
// docs/architecture.md §6, §10).
#include "parallel/emulated_device_communicator.h"

#include "core/error.h"
#include "ops/device_emulation.h"

namespace olmo2::parallel {

namespace {

/// The view as the host's (ops::emulated_host_view); the host stream goes with it.
TensorView h(const TensorView& v) { return ops::emulated_host_view(v); }

}  // namespace

EmulatedDeviceCommunicator::EmulatedDeviceCommunicator(std::unique_ptr<MpiCommunicator> group)
    : mpi_(std::move(group)) {
  if (!mpi_) OLMO2_THROW(Error, "EmulatedDeviceCommunicator: null MPI group communicator");
  if (!ops::device_emulated()) {
    OLMO2_THROW(Error, "EmulatedDeviceCommunicator for group ", mpi_->name(),
                " without OLMO2_DEVICE_EMULATION=1: a real device's views are not host memory");
  }
}

void EmulatedDeviceCommunicator::do_all_reduce(const TensorView& data, ReduceOp op, Stream) {
  mpi_->all_reduce(h(data), op);
}

void EmulatedDeviceCommunicator::do_all_gather(const TensorView& in, const TensorView& out, Stream) {
  mpi_->all_gather(h(in), h(out));
}

void EmulatedDeviceCommunicator::do_reduce_scatter(const TensorView& in, const TensorView& out,
                                                   ReduceOp op, Stream) {
  mpi_->reduce_scatter(h(in), h(out), op);
}

void EmulatedDeviceCommunicator::do_broadcast(const TensorView& data, int root, Stream) {
  mpi_->broadcast(h(data), root);
}

void EmulatedDeviceCommunicator::do_send(const TensorView& data, int peer, int tag, Stream) {
  mpi_->send(h(data), peer, tag);
}

void EmulatedDeviceCommunicator::do_recv(const TensorView& data, int peer, int tag, Stream) {
  mpi_->recv(h(data), peer, tag);
}

void EmulatedDeviceCommunicator::do_send_recv(const TensorView& out, const TensorView& in,
                                              int peer, int send_tag, int recv_tag, Stream) {
  mpi_->send_recv(h(out), h(in), peer, send_tag, recv_tag);
}

}  // namespace olmo2::parallel
