// HostStagedCommunicator: device views carried by MPI through host buffers, for groups
// whose ranks share a GPU (which NCCL refuses). Only in builds with CUDA.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace olmo2::parallel {

/// One process group whose ranks do not all have a GPU of their own (several ranks on
/// one GPU: a test or a small machine), docs/architecture.md §6 (communicators). A CUDA
/// view is copied to a page-locked host buffer (cudaMemcpyAsync on the call's stream,
/// a null handle meaning the compute stream, then cudaStreamSynchronize), the group's
/// MpiCommunicator runs the operation on the host copy, and the result is copied back
/// and synchronized, so every call returns with its result in place. Host views go to
/// the MpiCommunicator unchanged. Everything else is MpiCommunicator's: the sequence,
/// timeouts and their messages, dtypes, bf16 reductions, exact-size recv. The staging
/// buffers grow to the largest message and are kept (two: in and out). After a
/// CollectiveTimeout the MPI call stays pending on the staging buffer: wait_pending()
/// completes it there, but the device view is not updated (the step must be redone).
/// Not thread-safe.
class HostStagedCommunicator final : public Communicator {
 public:
  /// Takes `group` (Error when null); its name and timeout are this communicator's.
  explicit HostStagedCommunicator(std::unique_ptr<MpiCommunicator> group);
  ~HostStagedCommunicator() override;
  HostStagedCommunicator(const HostStagedCommunicator&) = delete;
  HostStagedCommunicator& operator=(const HostStagedCommunicator&) = delete;

  /// The group's MPI communicator.
  MpiCommunicator& host() { return *mpi_; }

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const std::string& name() const override { return mpi_->name(); }
  uint64_t sequence() const override { return mpi_->sequence(); }
  double timeout_s() const override { return mpi_->timeout_s(); }
  void set_timeout(double seconds) override { mpi_->set_timeout(seconds); }
  /// CPU (directly) and CUDA (staged through host memory).
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
  // A page-locked host buffer that grows to the largest request and is kept.
  struct Staging {
    void* data = nullptr;
    size_t bytes = 0;
  };
  TensorView stage(Staging& buf, const TensorView& like, const char* op);
  void to_host(const TensorView& dev, const TensorView& host, Stream stream, const char* op);
  void to_device(const TensorView& host, const TensorView& dev, Stream stream, const char* op);
  std::string where(const char* op) const;

  std::unique_ptr<MpiCommunicator> mpi_;
  Staging in_, out_;
};

}  // namespace olmo2::parallel
