// TimedCommunicator: a Communicator that forwards to another one and accounts the wall
// time and bytes of every call, per operation kind (benchmarks: the share of a training
// step spent communicating).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "parallel/communicator.h"

namespace olmo2::parallel {

/// The operations a Communicator offers; the byte and float variants share a kind.
enum class CommOp {
  all_reduce_sum,
  all_reduce_max,
  all_gather,
  reduce_scatter_sum,
  broadcast,
  barrier,
  send,
  recv,
  send_recv
};
inline constexpr int kCommOpCount = 9;

/// "all_reduce_sum", "send_recv", ... (the names CollectiveTimeout uses).
const char* to_string(CommOp op);

/// What one kind of call has cost since the last reset().
struct CommOpStats {
  uint64_t calls = 0;  ///< calls made (including those that threw)
  double seconds = 0;  ///< wall seconds inside the calls, waiting for peers included
  uint64_t bytes = 0;  ///< payload bytes, see TimedCommunicator
};

/// Wraps (and owns) another Communicator: every call is forwarded unchanged, and the
/// wall time from entry to return (or throw), which includes waiting for the peers, is
/// added to its kind's CommOpStats with the call's payload in bytes: the buffer's size
/// for all_reduce_*, broadcast, send and recv; out's for all_gather (the gathered
/// whole); in's for reduce_scatter_sum (the whole before scattering); out's plus in's
/// for send_recv; 0 for barrier. These are buffer sizes on this rank, not bytes on the
/// wire (which depend on MPI's algorithm). Errors pass through unchanged. Adds two clock
/// reads per call. Not thread-safe, like the communicator it wraps.
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

  std::string pending() const override { return inner_->pending(); }
  /// Forwarded; its time is not counted (it finishes a call already counted).
  void wait_pending() override { inner_->wait_pending(); }

 private:
  template <typename Fn>
  void timed(CommOp op, uint64_t bytes, Fn&& fn);
  std::unique_ptr<Communicator> inner_;
  std::array<CommOpStats, kCommOpCount> stats_{};
};

}  // namespace olmo2::parallel
