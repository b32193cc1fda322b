// HostStagedCommunicator (parallel/host_staged_communicator.h; docs/architecture.md §6).
#include "parallel/host_staged_communicator.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "ops/device_runtime.h"
#include "parallel/nccl_check.h"

namespace olmo2::parallel {

namespace {

cudaStream_t stream_of(Stream s) {
  return static_cast<cudaStream_t>(s.handle ? s.handle : ops::default_stream(Device::CUDA).handle);
}

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<MpiCommunicator> group)
    : mpi_(std::move(group)) {
  if (!mpi_) OLMO2_THROW(Error, "HostStagedCommunicator: null MPI group communicator");
}

HostStagedCommunicator::~HostStagedCommunicator() {
  // A call left pending by a timeout may still write into a staging buffer: MPI then
  // owns it until the job ends, so it is not freed.
  if (!mpi_->pending().empty()) return;
  if (in_.data) cudaFreeHost(in_.data);
  if (out_.data) cudaFreeHost(out_.data);
}

std::string HostStagedCommunicator::where(const char* op) const {
  return detail::concat("rank ", mpi_->world_rank(), " (", name(), " rank ", rank(), " of ", size(),
                        "), host-staged ", op, " on group ", name());
}

TensorView HostStagedCommunicator::stage(Staging& buf, const TensorView& like, const char* op) {
  // Growing would free memory that a pending MPI call still writes to: refuse first, as
  // MpiCommunicator would refuse the call itself.
  const std::string p = mpi_->pending();
  if (!p.empty()) {
    OLMO2_THROW(Error, where(op), " refused: ", p,
                " timed out and is still pending (wait_pending() completes it)");
  }
  const size_t bytes = static_cast<size_t>(like.bytes());
  if (bytes > buf.bytes) {
    if (buf.data) OLMO2_COMM_CUDA_CHECK(cudaFreeHost(buf.data), where(op));
    buf = Staging{};
    OLMO2_COMM_CUDA_CHECK(cudaMallocHost(&buf.data, bytes), where(op));
    buf.bytes = bytes;
  }
  return TensorView(buf.data, like.dtype(), {like.numel()});
}

void HostStagedCommunicator::to_host(const TensorView& dev, const TensorView& host, Stream stream,
                                     const char* op) {
  if (dev.numel() == 0) return;
  const cudaStream_t s = stream_of(stream);
  OLMO2_COMM_CUDA_CHECK(
      cudaMemcpyAsync(host.data(), dev.data(), host.bytes(), cudaMemcpyDeviceToHost, s), where(op));
  OLMO2_COMM_CUDA_CHECK(cudaStreamSynchronize(s), where(op));
}

void HostStagedCommunicator::to_device(const TensorView& host, const TensorView& dev, Stream stream,
                                       const char* op) {
  if (dev.numel() == 0) return;
  const cudaStream_t s = stream_of(stream);
  OLMO2_COMM_CUDA_CHECK(
      cudaMemcpyAsync(dev.data(), host.data(), host.bytes(), cudaMemcpyHostToDevice, s), where(op));
  OLMO2_COMM_CUDA_CHECK(cudaStreamSynchronize(s), where(op));
}

void HostStagedCommunicator::do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) {
  if (data.device() == Device::CPU) return mpi_->all_reduce(data, op, stream);
  const TensorView h = stage(in_, data, "all_reduce");
  to_host(data, h, stream, "all_reduce");
  mpi_->all_reduce(h, op);
  to_device(h, data, stream, "all_reduce");
}

void HostStagedCommunicator::do_all_gather(const TensorView& in, const TensorView& out,
                                           Stream stream) {
  if (in.device() == Device::CPU) return mpi_->all_gather(in, out, stream);
  const TensorView hi = stage(in_, in, "all_gather"), ho = stage(out_, out, "all_gather");
  to_host(in, hi, stream, "all_gather");
  mpi_->all_gather(hi, ho);
  to_device(ho, out, stream, "all_gather");
}

void HostStagedCommunicator::do_reduce_scatter(const TensorView& in, const TensorView& out,
                                               ReduceOp op, Stream stream) {
  if (in.device() == Device::CPU) return mpi_->reduce_scatter(in, out, op, stream);
  const TensorView hi = stage(in_, in, "reduce_scatter"), ho = stage(out_, out, "reduce_scatter");
  to_host(in, hi, stream, "reduce_scatter");
  mpi_->reduce_scatter(hi, ho, op);
  to_device(ho, out, stream, "reduce_scatter");
}

void HostStagedCommunicator::do_broadcast(const TensorView& data, int root, Stream stream) {
  if (data.device() == Device::CPU) return mpi_->broadcast(data, root, stream);
  const TensorView h = stage(in_, data, "broadcast");
  if (rank() == root) to_host(data, h, stream, "broadcast");
  mpi_->broadcast(h, root);
  if (rank() != root) to_device(h, data, stream, "broadcast");
}

void HostStagedCommunicator::do_send(const TensorView& data, int peer, int tag, Stream stream) {
  if (data.device() == Device::CPU) return mpi_->send(data, peer, tag, stream);
  const TensorView h = stage(in_, data, "send");
  to_host(data, h, stream, "send");
  mpi_->send(h, peer, tag);
}

void HostStagedCommunicator::do_recv(const TensorView& data, int peer, int tag, Stream stream) {
  if (data.device() == Device::CPU) return mpi_->recv(data, peer, tag, stream);
  const TensorView h = stage(out_, data, "recv");
  mpi_->recv(h, peer, tag);
  to_device(h, data, stream, "recv");
}

void HostStagedCommunicator::do_send_recv(const TensorView& out, const TensorView& in, int peer,
                                          int send_tag, int recv_tag, Stream stream) {
  if (out.device() == Device::CPU) return mpi_->send_recv(out, in, peer, send_tag, recv_tag, stream);
  const TensorView ho = stage(in_, out, "send_recv"), hi = stage(out_, in, "send_recv");
  to_host(out, ho, stream, "send_recv");
  mpi_->send_recv(ho, hi, peer, send_tag, recv_tag);
  to_device(hi, in, stream, "send_recv");
}

}  // namespace olmo2::parallel
