// MpiCommunicator: Communicator over one MPI communicator, with per-call timeouts.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "parallel/communicator.h"

namespace olmo2::parallel {

/// Communicator carried by Open MPI (CPU buffers only: Debian's Open MPI is not
/// CUDA-aware). Every call posts a non-blocking MPI operation (MPI_Iallreduce,
/// MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Ibcast, MPI_Ibarrier, MPI_Isend,
/// MPI_Irecv) and polls MPI_Test, yielding then sleeping briefly between polls so that
/// oversubscribed ranks leave the cores to each other, until it completes or timeout_s()
/// passes (CollectiveTimeout; the operation then stays pending, see wait_pending()).
/// The communicator is switched to MPI_ERRORS_RETURN so that MPI failures become Error
/// exceptions naming the call and the group instead of aborting the job.
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

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  uint64_t sequence() const override { return sequence_; }
  double timeout_s() const override { return timeout_s_; }
  void set_timeout(double seconds) override;

  void all_reduce_sum(std::span<float> data) override;
  void all_reduce_max(std::span<float> data) override;
  void all_gather(std::span<const float> in, std::span<float> out) override;
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override;
  void broadcast(std::span<float> data, int root) override;
  void broadcast(std::span<std::byte> data, int root) override;
  void barrier() override;
  void send(std::span<const float> data, int peer, int tag) override;
  void send(std::span<const std::byte> data, int peer, int tag) override;
  void recv(std::span<float> data, int peer, int tag) override;
  void recv(std::span<std::byte> data, int peer, int tag) override;
  void send_recv(std::span<const float> out, std::span<float> in, int peer, int send_tag,
                 int recv_tag) override;

  std::string pending() const override;
  void wait_pending() override;

 private:
  using Clock = std::chrono::steady_clock;

  // What one call is doing, for messages and for checking a recv's size on completion.
  struct Op {
    const char* name = "";  // "all_reduce_sum", "send", ...
    uint64_t sequence = 0;  // the collective's number; for send/recv the count before it
    size_t count = 0;       // elements
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
  };

  Op begin(const char* name, size_t count, MPI_Datatype type, bool p2p);
  template <typename Post>
  void run(const Op& op, const char* call, Post&& post);
  void wait(MPI_Request* request, const Op& op, double waited_before_s);
  void check(int rc, const char* call, const Op& op) const;
  void check_root(const char* name, int root) const;
  void check_peer(const char* name, int peer, int tag) const;
  std::string who() const;
  std::string describe(const Op& op) const;
  std::string details(const Op& op) const;
  void send_raw(const void* data, size_t count, MPI_Datatype type, int peer, int tag);
  void recv_raw(void* data, size_t count, MPI_Datatype type, int peer, int tag);

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
