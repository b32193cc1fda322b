// MpiCommunicator: Communicator over one MPI communicator, with per-call timeouts.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace olmo2::parallel {

/// Communicator carried by Open MPI, for host (CPU) views only: Debian's Open MPI is not
/// CUDA-aware, so a CUDA view is refused with a ShapeError naming the operation (the
/// NCCL communicator carries device tensors). dtypes map to MPI datatypes: f32 MPI_FLOAT,
/// f64 MPI_DOUBLE, i32 MPI_INT32_T, i64 MPI_INT64_T, u8 MPI_UINT8_T; bf16 and f16, which
/// MPI lacks, move as 16-bit words (MPI_UINT16_T), and bf16 is reduced by two
/// commutative user-defined MPI_Ops that add or take the maximum in f32 and round to
/// nearest even (f32_to_bf16), created on first use and freed when MPI_Finalize starts
/// (an attribute on MPI_COMM_SELF, whose deletion the MPI standard runs first in
/// MPI_Finalize). Every call posts a non-blocking MPI operation (MPI_Iallreduce,
/// MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Ibcast, MPI_Ibarrier, MPI_Isend,
/// MPI_Irecv) and polls MPI_Test (the *_start calls: in their handle's wait()), yielding then sleeping briefly between polls so that
/// oversubscribed ranks leave the cores to each other, until it completes or timeout_s()
/// passes (CollectiveTimeout, naming the dtype and element count, e.g. "(1024 f32)"; the
/// operation then stays pending, see wait_pending()). Element counts above INT_MAX are
/// refused (ShapeError). The communicator is switched to MPI_ERRORS_RETURN so that MPI
/// failures become Error exceptions naming the call and the group instead of aborting
/// the job. docs/architecture.md §6 (communicators).
class MpiCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` (freed with MPI_Comm_free by the destructor). `name` is
  /// the group's name in messages ("world", "tp", "dp", "pp"); `timeout_s` ≥ 0 (0 =
  /// wait forever). MPI must be initialised. Throws Error for MPI_COMM_NULL,
  /// MPI_COMM_WORLD or MPI_COMM_SELF (which cannot be freed: pass a duplicate) and
  /// InputError for a negative timeout.
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s);
  /// Frees the communicator unless MPI is already finalised. An operation still pending
  /// after a timeout is left to MPI (it completes when the peers join).
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  /// The underlying MPI communicator (still owned by this object), e.g. to broadcast a
  /// NCCL unique id or to split further.
  MPI_Comm handle() const { return comm_; }
  /// This process's rank in MPI_COMM_WORLD.
  int world_rank() const { return world_rank_; }

  /// The MPI datatype a view of `dtype` travels as (MPI_UINT16_T for bf16 and f16).
  static MPI_Datatype mpi_datatype(DType dtype);
  /// Counts one collective of this group carried by another transport (the NCCL
  /// communicator's device collectives) and returns its number, so that a group's
  /// collectives share one sequence whatever carries them (docs/architecture.md §6).
  uint64_t count_collective() { return ++sequence_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  uint64_t sequence() const override { return sequence_; }
  double timeout_s() const override { return timeout_s_; }
  void set_timeout(double seconds) override;
  /// CPU only.
  bool supports(Device device) const override { return device == Device::CPU; }
  /// MPI_TAG_UB of the communicator.
  int tag_limit() const override { return tag_ub_; }

  std::string pending() const override;
  void wait_pending() override;

 protected:
  void do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) override;
  /// Posts MPI_Iallreduce; the handle's wait() polls it with this group's timeout, its
  /// test() calls MPI_Test once.
  AsyncHandle do_all_reduce_start(const TensorView& data, ReduceOp op, Stream stream) override;
  void do_all_gather(const TensorView& in, const TensorView& out, Stream stream) override;
  /// Posts MPI_Iallgather; the handle as all_reduce_start's.
  AsyncHandle do_all_gather_start(const TensorView& in, const TensorView& out, Stream stream) override;
  void do_reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                         Stream stream) override;
  /// Posts MPI_Ireduce_scatter_block; the handle as all_reduce_start's.
  AsyncHandle do_reduce_scatter_start(const TensorView& in, const TensorView& out, ReduceOp op,
                                      Stream stream) override;
  void do_broadcast(const TensorView& data, int root, Stream stream) override;
  void do_send(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_recv(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_send_recv(const TensorView& out, const TensorView& in, int peer, int send_tag,
                    int recv_tag, Stream stream) override;
  /// Posts MPI_Isend; the handle's wait() polls it with this group's timeout.
  AsyncHandle do_send_start(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_barrier() override;
  std::string device_note(Device device) const override;

 private:
  using Clock = std::chrono::steady_clock;

  // What one call is doing, for messages and for checking a recv's size on completion.
  struct Op {
    const char* name = "";  // "all_reduce_sum", "send", ...
    uint64_t sequence = 0;  // the collective's number; for send/recv the count before it
    size_t count = 0;       // elements
    DType dtype = DType::U8;
    MPI_Datatype type = MPI_BYTE;
    int peer = -1;  // send/recv only
    int tag = -1;   // send/recv only
    bool p2p = false;
    bool check_count = false;  // recv: the message must hold exactly `count` elements
  };
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    Op op;
    double waited_s = 0;
    void* probe_into = nullptr;  // a receive that timed out before its message came: wait_pending receives it here
    bool active() const { return request != MPI_REQUEST_NULL || probe_into != nullptr; }
  };

  Op begin(const char* name, const TensorView& data, bool p2p);
  /// The handle of a posted collective: wait() polls `request` (wait), test() MPI_Test.
  AsyncHandle started(std::shared_ptr<MPI_Request> request, const Op& op);
  template <typename Post>
  void run(const Op& op, const char* call, Post&& post);
  void wait(MPI_Request* request, const Op& op, double waited_before_s);
  /// The receive `op` into `data`, its size checked before a byte is copied: polls
  /// MPI_Improbe (with the group's timeout) until the message is there, receives it with
  /// MPI_Mrecv only when it holds exactly op.count elements; a message of another size is
  /// received whole into scratch memory of its own size (the sender is not left waiting)
  /// and is an Error naming both sizes. CollectiveTimeout when none comes in time.
  void receive_checked(void* data, const Op& op, double waited_before_s);
  void check(int rc, const char* call, const Op& op) const;
  MPI_Op reduction(ReduceOp op, DType dtype, const Op& call) const;
  std::string who() const;
  std::string describe(const Op& op) const;
  std::string details(const Op& op) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  double timeout_s_ = 0;
  int rank_ = 0;
  int size_ = 1;
  int world_rank_ = 0;
  int tag_ub_ = 32767;
  uint64_t sequence_ = 0;
  Pending pending_;
};

}  // namespace olmo2::parallel
