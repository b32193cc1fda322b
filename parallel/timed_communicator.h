// TimedCommunicator: a Communicator that forwards to another one and accounts the wall
// time and bytes of every call, per operation kind (benchmarks: the share of a training
// step spent communicating).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace olmo2::parallel {

/// The kinds of call a Communicator offers, by operation and reduction; the dtypes and
/// the host-span conveniences of one operation share its kind. New kinds are appended
/// (indexes stay stable for tables built on them).
enum class CommOp {
  all_reduce_sum,
  all_reduce_max,
  all_gather,
  reduce_scatter_sum,
  broadcast,
  barrier,
  send,
  recv,
  send_recv,
  reduce_scatter_max
};
inline constexpr int kCommOpCount = 10;

/// "all_reduce_sum", "send_recv", ... (the names CollectiveTimeout uses).
const char* to_string(CommOp op);

/// What one kind of call has cost since the last reset().
struct CommOpStats {
  uint64_t calls = 0;  ///< calls forwarded (including those the inner communicator failed)
  double seconds = 0;  ///< wall seconds inside the calls, waiting for peers included
  uint64_t bytes = 0;  ///< payload bytes, see TimedCommunicator
};

/// Wraps (and owns) another Communicator: every call is forwarded unchanged (the typed
/// view, the reduction and the stream), and the wall time from entry to return (or
/// throw), which includes waiting for the peers, is added to its kind's CommOpStats
/// with the call's payload in bytes, element count × dtype_size(dtype): the view's for
/// all_reduce, broadcast, send and recv; out's for all_gather (the gathered whole);
/// in's for reduce_scatter (the whole before scattering); out's plus in's for
/// send_recv; 0 for barrier. So 3 f64 count 24 bytes, 4 bf16 8. These are buffer sizes
/// on this rank, not bytes on the wire (which depend on the transport's algorithm).
/// Calls the wrapper's own checks refuse (ShapeError, see Communicator) are not
/// counted; errors of the inner communicator pass through unchanged and are counted.
/// On a CUDA stream the time is that of enqueueing only. Adds two clock reads per call.
/// Not thread-safe, like the communicator it wraps. docs/architecture.md §6
/// (communicators) and §9 (metrics).
class TimedCommunicator final : public Communicator {
 public:
  /// Takes ownership of `inner`; Error when it is null.
  explicit TimedCommunicator(std::unique_ptr<Communicator> inner);

  /// The wrapped communicator.
  Communicator& inner() { return *inner_; }
  /// The totals of one kind of operation since construction or the last reset().
  const CommOpStats& stats(CommOp op) const { return stats_[static_cast<int>(op)]; }
  /// Seconds inside every call since the last reset(), all kinds together.
  double total_seconds() const;
  /// Payload bytes of every call since the last reset(), all kinds together.
  uint64_t total_bytes() const;
  /// Calls since the last reset(), all kinds together.
  uint64_t total_calls() const;
  /// Sets every count, time and byte total to zero (sequence() is not touched).
  void reset();

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  uint64_t sequence() const override { return inner_->sequence(); }
  double timeout_s() const override { return inner_->timeout_s(); }
  void set_timeout(double seconds) override { inner_->set_timeout(seconds); }
  bool supports(Device device) const override { return inner_->supports(device); }
  int tag_limit() const override { return inner_->tag_limit(); }

  std::string pending() const override { return inner_->pending(); }
  /// Forwarded; its time is not counted (it finishes a call already counted).
  void wait_pending() override { inner_->wait_pending(); }

 protected:
  void do_all_reduce(const TensorView& data, ReduceOp op, Stream stream) override;
  void do_all_gather(const TensorView& in, const TensorView& out, Stream stream) override;
  /// Forwarded; counted as one all_gather (its bytes when posted), its time that of
  /// posting plus that of the handle's test() and wait() calls.
  AsyncHandle do_all_gather_start(const TensorView& in, const TensorView& out, Stream stream) override;
  /// Forwarded; counted like all_gather_start under the all_reduce kind.
  AsyncHandle do_all_reduce_start(const TensorView& data, ReduceOp op, Stream stream) override;
  void do_reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                         Stream stream) override;
  /// Forwarded; counted like all_gather_start under the reduce_scatter kind.
  AsyncHandle do_reduce_scatter_start(const TensorView& in, const TensorView& out, ReduceOp op,
                                      Stream stream) override;
  void do_broadcast(const TensorView& data, int root, Stream stream) override;
  void do_send(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_recv(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_send_recv(const TensorView& out, const TensorView& in, int peer, int send_tag,
                    int recv_tag, Stream stream) override;
  /// Forwarded; counted as one send (one recv), its time that of posting plus that of
  /// the handle's wait().
  AsyncHandle do_send_start(const TensorView& data, int peer, int tag, Stream stream) override;
  AsyncHandle do_recv_start(const TensorView& data, int peer, int tag, Stream stream) override;
  void do_barrier() override;

 private:
  template <typename Fn>
  void timed(CommOp op, uint64_t bytes, Fn&& fn);
  /// Posts with `start` (counted as one call of `op`) and returns a handle whose test()
  /// and wait() time is added to `op` too.
  template <typename Start>
  AsyncHandle timed_start(CommOp op, uint64_t bytes, Start&& start);
  std::unique_ptr<Communicator> inner_;
  std::array<CommOpStats, kCommOpCount> stats_{};
};

}  // namespace olmo2::parallel
