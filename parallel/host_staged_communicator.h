// HostStagedCommunicator: carries device views over a communicator that moves host
// memory only (MPI: Debian's Open MPI is not CUDA-aware) by copying each view to the
// host, running the collective there and copying the result back (docs/architecture.md
// §6). Slow — every call is a device ↔ host round trip — but it runs any layout on
// any number of GPUs, several ranks on one GPU included, where NCCL refuses two ranks
// on one device: what the multi-rank GPU tests use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/tensor.h"
#include "parallel/communicator.h"

namespace olmo2::parallel {

/// Forwards every call to `inner` (a communicator of host views); views on a device are
/// staged through host tensors with ops::copy: device → host before the call (that copy
/// is complete when ops::copy returns), host → device after it (ordered on the compute
/// stream, before any later op). Host views pass through unchanged. rank, size, name,
/// sequence, timeouts and pending operations are the inner communicator's. When the
/// inner call times out its host buffers are kept alive until wait_pending() completes
/// it (MPI cannot cancel a posted operation).
class HostStagedCommunicator final : public Communicator {
 public:
  /// Throws Error when `inner` is null.
  explicit HostStagedCommunicator(std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  uint64_t sequence() const override { return inner_->sequence(); }
  double timeout_s() const override { return inner_->timeout_s(); }
  void set_timeout(double seconds) override { inner_->set_timeout(seconds); }
  /// Host views always; device views by staging.
  bool supports(Device) const override { return true; }
  int tag_limit() const override { return inner_->tag_limit(); }
  std::string pending() const override { return inner_->pending(); }
  void wait_pending() override;

 protected:
  void do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) override;
  void do_all_gather(const TensorView& in, const TensorView& out, Stream stream) override;
  void do_reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op, Stream stream) override;
  void do_broadcast(const TensorView& data, int root, Stream stream) override;
  void do_send(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_recv(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_send_recv(const TensorView& out, const TensorView& in, int peer, int send_tag, int recv_tag,
                    Stream stream) override;
  void do_barrier() override { inner_->barrier(); }

 private:
  /// Runs `fn` on host views of `in` (copied from the device) and `out` (copied back to
  /// the device afterwards); either may be null (not used).
  template <typename Fn>
  void staged(const TensorView* in, const TensorView* out, Fn&& fn);
  std::unique_ptr<Communicator> inner_;
  std::vector<Tensor> pending_buffers_;  ///< host buffers of an operation left pending by a timeout
};

}  // namespace olmo2::parallel
