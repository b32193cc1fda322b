// Communicator: the collectives and point-to-point messages of one process group,
// independent of the transport (MPI for CPU tensors and bootstrap, NCCL for GPU ones).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "core/error.h"

namespace olmo2::parallel {

/// A collective or message that did not complete within the communicator's timeout.
/// what() says where every rank stands, e.g.
/// "rank 0 (tp rank 0 of 2): all_reduce_sum #3 on group tp timed out after 2.0 s (1024 floats)".
/// The operation stays posted (MPI cannot cancel a collective): its buffers must stay
/// valid until Communicator::wait_pending() completes it, or the job is aborted.
class CollectiveTimeout : public Error {
 public:
  CollectiveTimeout(const std::string& message, std::string op, std::string group,
                    uint64_t sequence, double waited_s, const char* file, int line)
      : Error(message, file, line),
        op_(std::move(op)),
        group_(std::move(group)),
        sequence_(sequence),
        waited_s_(waited_s) {}
  /// The operation: "all_reduce_sum", "barrier", "send", ...
  const std::string& op() const { return op_; }
  /// The group's name: "world", "tp", "dp", "pp".
  const std::string& group() const { return group_; }
  /// The collective's sequence number (for send/recv: the collectives issued before it).
  uint64_t sequence() const { return sequence_; }
  /// Seconds waited before giving up.
  double waited_s() const { return waited_s_; }

 private:
  std::string op_, group_;
  uint64_t sequence_;
  double waited_s_;
};

/// One process group. Every member must issue the same collectives in the same order
/// with matching sizes (as in MPI and NCCL); sequence() counts them so that a hang can
/// be located. All calls block until the operation completes locally, or throw
/// CollectiveTimeout after timeout_s() seconds (0 = wait forever). Sizes are checked
/// up front (ShapeError naming them); a transport failure throws Error. Element counts
/// above INT_MAX are refused (ShapeError). Not thread-safe: one thread per communicator.
class Communicator {
 public:
  virtual ~Communicator() = default;

  /// This process's rank in the group, in [0, size()).
  virtual int rank() const = 0;
  /// Number of ranks in the group.
  virtual int size() const = 0;
  /// The group's name for messages: "world", "tp", "dp" or "pp".
  virtual const std::string& name() const = 0;
  /// Number of collectives issued so far on this communicator (send/recv not counted);
  /// the k-th collective is reported as "#k". Equal on every member between collectives.
  virtual uint64_t sequence() const = 0;
  /// Seconds a call waits before throwing CollectiveTimeout; 0 = forever.
  virtual double timeout_s() const = 0;
  /// Sets timeout_s(); InputError when seconds < 0.
  virtual void set_timeout(double seconds) = 0;

  /// In place: data[i] = Σ over ranks of data[i]. Same size on every rank.
  virtual void all_reduce_sum(std::span<float> data) = 0;
  /// In place: data[i] = max over ranks of data[i]. Same size on every rank.
  virtual void all_reduce_max(std::span<float> data) = 0;
  /// out = concatenation of every rank's `in`, rank-major: out[r·n + i] = in_r[i], with
  /// n = in.size(). out.size() must be size()·n; in and out must not overlap.
  virtual void all_gather(std::span<const float> in, std::span<float> out) = 0;
  /// out[i] = Σ over ranks r of in_r[rank()·n + i], with n = out.size(); in.size() must
  /// be size()·n; in and out must not overlap.
  virtual void reduce_scatter_sum(std::span<const float> in, std::span<float> out) = 0;
  /// data on every rank = data on `root` (a group rank in [0, size())).
  virtual void broadcast(std::span<float> data, int root) = 0;
  /// Byte version of broadcast (plans, ids, integers).
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  /// Blocks until every member has entered the barrier.
  virtual void barrier() = 0;

  /// Sends `data` to group rank `peer` (≠ rank()) with `tag` (≥ 0, below the
  /// transport's limit, at least 32767); returns once the buffer may be reused, which
  /// for large messages means the peer has posted the matching recv.
  virtual void send(std::span<const float> data, int peer, int tag) = 0;
  /// Byte version of send.
  virtual void send(std::span<const std::byte> data, int peer, int tag) = 0;
  /// Receives exactly data.size() floats from group rank `peer` with `tag`; a message of
  /// another size throws Error.
  virtual void recv(std::span<float> data, int peer, int tag) = 0;
  /// Byte version of recv.
  virtual void recv(std::span<std::byte> data, int peer, int tag) = 0;
  /// Sends `out` to group rank `peer` with `send_tag` and receives exactly in.size()
  /// floats from the same peer with `recv_tag`, both posted at once, so two ranks that
  /// exchange with each other cannot deadlock whatever the message sizes (what a
  /// pipeline stage does when it sends an activation forward and receives a gradient
  /// back: Megatron's send_forward_recv_backward). `out` and `in` must not overlap.
  /// On a timeout the unfinished half stays posted (pending()).
  virtual void send_recv(std::span<const float> out, std::span<float> in, int peer, int send_tag,
                         int recv_tag) = 0;

  /// Description of the operation left posted by a CollectiveTimeout, "" when none.
  /// While one is pending every other call throws Error.
  virtual std::string pending() const = 0;
  /// Waits (up to timeout_s() again) for the pending operation, if any, to complete;
  /// throws CollectiveTimeout when it still does not.
  virtual void wait_pending() = 0;
};

}  // namespace olmo2::parallel
