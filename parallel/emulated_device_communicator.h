// EmulatedDeviceCommunicator: the device communicator of an emulated device
// (OLMO2_DEVICE_EMULATION=1, ops/device_emulation.h), whose Device::CUDA views are host
// memory: it hands them to the group's MpiCommunicator re-flagged as host views, so the
// layouts' collectives on device views run on a machine without a GPU
// (docs/architecture.md §2, §6, §10). Any build; no CUDA runtime function is called.
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace olmo2::parallel {

/// One process group on an emulated device. Every call goes to the group's
/// MpiCommunicator, a CUDA view as ops::emulated_host_view of itself and the stream as
/// the host's: the sequence, timeouts and their messages, dtypes, bf16 reductions and
/// exact-size recv are MpiCommunicator's. Constructing it outside emulation throws
/// Error. Not thread-safe.
class EmulatedDeviceCommunicator final : public Communicator {
 public:
  /// Takes `group` (Error when null, or when the device is not emulated).
  explicit EmulatedDeviceCommunicator(std::unique_ptr<MpiCommunicator> group);

  /// The group's MPI communicator.
  MpiCommunicator& host() { return *mpi_; }

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const std::string& name() const override { return mpi_->name(); }
  uint64_t sequence() const override { return mpi_->sequence(); }
  double timeout_s() const override { return mpi_->timeout_s(); }
  void set_timeout(double seconds) override { mpi_->set_timeout(seconds); }
  /// CPU and (emulated) CUDA.
  bool supports(Device) const override { return true; }
  int tag_limit() const override { return mpi_->tag_limit(); }
  std::string pending() const override { return mpi_->pending(); }
  void wait_pending() override { mpi_->wait_pending(); }

 protected:
  void do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) override;
  void do_all_gather(const TensorView& in, const TensorView& out, Stream stream) override;
  void do_reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                         Stream stream) override;
  void do_broadcast(const TensorView& data, int root, Stream stream) override;
  void do_send(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_recv(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_send_recv(const TensorView& out, const TensorView& in, int peer, int send_tag,
                    int recv_tag, Stream stream) override;
  void do_barrier() override { mpi_->barrier(); }

 private:
  std::unique_ptr<MpiCommunicator> mpi_;
};

}  // namespace olmo2::parallel
