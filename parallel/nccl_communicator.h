// NcclCommunicator: Communicator over one NCCL communicator for device (CUDA) views,
// with the group's MPI communicator for host views and bootstrap. Only in builds with
// CUDA (OLMO2_HAVE_CUDA).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/completion_watchdog.h"
#include "parallel/mpi_communicator.h"

namespace olmo2::parallel {

/// One process group on GPUs (docs/architecture.md §6 (communicators)). Device views
/// travel through NCCL; host views go to the group's MpiCommunicator unchanged, so one
/// object serves a group's activations and its host-side sums and flags alike. The two
/// share one sequence: sequence() counts every collective of the group in issue order
/// whatever carries it (MpiCommunicator::count_collective).
///
/// Creation: rank 0 of the group makes a unique id (ncclGetUniqueId) and broadcasts it
/// with a success flag over the group's MPI communicator (so a failure there throws on
/// every rank instead of leaving peers waiting; this broadcast is collective #1), then
/// every rank calls ncclCommInitRankConfig on its current GPU with a non-blocking config
/// (blocking = 0, commName = the group's name) and polls ncclCommGetAsyncError until
/// the communicator is ready, up to timeout_s(). The constructor is collective over the
/// group, and groups overlap, so every rank must make its device communicators in the
/// same order (ProcessGroups' order: world, tp, dp, pp). NCCL refuses two ranks of one
/// communicator on the same GPU: such groups take HostStagedCommunicator
/// (make_device_communicator decides).
///
/// Device calls: dtypes map to ncclFloat32, ncclBfloat16, ncclFloat16, ncclFloat64,
/// ncclInt32, ncclInt64 and ncclUint8; Sum and Max to ncclSum and ncclMax (NCCL adds
/// bf16 pairwise, rounding each sum to bf16, as the class contract says). Work is
/// enqueued on the given stream (a null handle: the compute stream, ops::default_stream)
/// by ncclAllReduce (in place), ncclAllGather, ncclReduceScatter, ncclBroadcast (in
/// place), ncclSend / ncclRecv, and ncclSend + ncclRecv in one ncclGroupStart/End for
/// send_recv. Empty views enqueue nothing (but a collective is still counted). NCCL has
/// no tags: tags are checked, not carried, and the messages between two ranks match in
/// the order they are issued; NCCL cannot report a recv of another element count than
/// the send's (a mismatch hangs or corrupts: the caller must post equal counts).
///
/// Waiting and hang diagnostics: with timeout_s() > 0 every device call records an
/// event after its work and polls cudaEventQuery and ncclCommGetAsyncError (yielding,
/// then sleeping between polls, as MpiCommunicator does) until it completes, so a call
/// returns with its result in place. Past the timeout the NCCL communicator is aborted
/// (ncclCommAbort, which ends its kernels, so the buffers are free again) and
/// CollectiveTimeout is thrown with MpiCommunicator's message format, e.g. "rank 0 (tp
/// rank 0 of 2): all_reduce_sum #3 on group tp timed out after 2.0 s (1024 f32)". The
/// time includes the stream's earlier work. An asynchronous NCCL error aborts the
/// communicator too and throws Error naming it. After an abort every device call
/// throws Error (the group must be made again); pending() names the aborted call and
/// wait_pending() throws Error. With timeout_s() == 0 a device call returns once its
/// work is enqueued (stream order; errors surface on a later call). Host views keep
/// MpiCommunicator's behaviour (timeouts leave the MPI call pending). Not thread-safe.
class NcclCommunicator final : public Communicator {
 public:
  /// Makes the NCCL communicator of `group` (collective over it, see the class note) on
  /// the current GPU; the name and timeout are the group's. Throws Error when `group` is
  /// null, when NCCL or CUDA fails (naming the call, the group and the rank), and
  /// CollectiveTimeout when initialisation does not finish within the group's timeout.
  explicit NcclCommunicator(std::unique_ptr<MpiCommunicator> group);
  /// ncclCommFinalize, then ncclCommDestroy; ncclCommAbort instead when finalising does
  /// not finish within timeout_s() (or 10 s when 0) or after an earlier abort.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  /// The group's MPI communicator (host views and bootstrap).
  MpiCommunicator& host() { return *mpi_; }
  /// The CUDA device ordinal the NCCL communicator was made on.
  int gpu() const { return gpu_; }
  /// True once the NCCL communicator was aborted (timeout or asynchronous error).
  bool aborted() const { return aborted_ || watchdog_fired(); }
  /// With a timeout set, a collective returns once enqueued and a watchdog thread
  /// watches it complete (docs/architecture.md §6); when one times out the watchdog
  /// aborts the communicator, and the next call here, or this check, throws
  /// CollectiveTimeout naming it (Error when the GPU reported a failure instead).
  void check_health() { throw_if_watchdog_failed(); }
  /// True once the watchdog has recorded a timeout or failure (not yet thrown, or thrown).
  bool watchdog_fired() const { return watchdog_ && watchdog_->failure().has_value(); }
  /// The NCCL dtype a view of `dtype` travels as.
  static ncclDataType_t nccl_datatype(DType dtype);

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  const std::string& name() const override { return mpi_->name(); }
  uint64_t sequence() const override { return mpi_->sequence(); }
  double timeout_s() const override { return mpi_->timeout_s(); }
  void set_timeout(double seconds) override { mpi_->set_timeout(seconds); }
  /// CPU (through MPI) and CUDA (through NCCL).
  bool supports(Device) const override { return true; }
  /// The MPI communicator's (NCCL ignores tags).
  int tag_limit() const override { return mpi_->tag_limit(); }

  std::string pending() const override;
  void wait_pending() override;

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
  using Clock = std::chrono::steady_clock;
  // What one device call is doing, for messages.
  struct Op {
    std::string name;       // "all_reduce_sum", "send", ...
    uint64_t sequence = 0;  // the collective's number; for send/recv the count before it
    int64_t count = 0;      // elements
    DType dtype = DType::U8;
    int peer = -1;  // send/recv only
    int tag = -1;   // send/recv only; send_recv: the send's
    int tag2 = -1;  // send_recv: the recv's tag
    int64_t count2 = 0;  // send_recv: the elements received
    bool p2p = false;
    bool from = false;  // recv: "from" the peer, not "to"
  };

  Op begin(std::string name, const TensorView& data, bool p2p);
  template <typename Enqueue>
  void run(const Op& op, Stream stream, Enqueue&& enqueue);
  void settle(const Op& op, Clock::time_point start);
  void watch(const Op& op, cudaStream_t stream);
  void throw_if_watchdog_failed();
  cudaEvent_t take_event(const Op& op);
  [[noreturn]] void abort_and_throw_timeout(const Op& op, double waited);
  void abort_comm();
  std::string who() const;
  std::string describe(const Op& op) const;
  std::string details(const Op& op) const;
  std::string where(const Op& op) const { return who() + ", " + describe(op); }

  std::unique_ptr<MpiCommunicator> mpi_;
  ncclComm_t comm_ = nullptr;
  int gpu_ = -1;
  bool aborted_ = false;
  std::string aborted_op_;  // describe() of the call that aborted the communicator
  bool first_collective_done_ = false;
  // The timeout watchdog (made on the first watched call, remade when the timeout
  // changes): each collective's completion event is watched from its thread, so no call
  // waits for the stream (docs/architecture.md §6). The ops it watches, by id, and the
  // completion events to reuse, both shared with its thread.
  std::unique_ptr<CompletionWatchdog> watchdog_;
  double watchdog_timeout_ = 0;
  std::mutex watched_mu_;
  std::map<int64_t, Op> watched_;
  int64_t next_watch_id_ = 0;
  std::vector<cudaEvent_t> free_events_, all_events_;
};

}  // namespace olmo2::parallel
