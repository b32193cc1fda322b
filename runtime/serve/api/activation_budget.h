// The server-wide bound on activation reads (docs/architecture.md §13 "Limits and
// errors"): each request's reads are bounded by --max-activation-bytes, and all requests
// in the server together by --max-activation-memory, since rank 0 holds every read until
// its response is written. A request whose reads do not fit waits (first come, first
// served) until earlier ones finish; one larger than the whole budget is refused.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "monitoring/serve_metrics.h"

namespace olmo2 {

class ActivationBudget {
 public:
  /// `capacity` bytes (> 0); `metrics` (may be null) gets the reserved bytes and the
  /// waiting count at every change.
  ActivationBudget(int64_t capacity, monitoring::ServeMetrics* metrics);

  /// Bytes reserved until destroyed (moved-from: none).
  class Lease {
   public:
    Lease() = default;
    Lease(ActivationBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    Lease(Lease&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept;
    ~Lease();
    int64_t bytes() const { return budget_ ? bytes_ : 0; }

   private:
    ActivationBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  /// Reserves `bytes` (≥ 0; 0 returns at once), waiting behind the requests that asked
  /// before while they do not fit. `abandoned` (a client that hung up) is asked before
  /// the wait and whenever the waiter is woken — by a lease's release, another waiter
  /// giving up, or wake(): then returns an empty lease without reserving. There is no
  /// timeout: whoever makes `abandoned` true must call wake() after. Throws InputError
  /// naming both sizes when bytes > capacity (it could never fit).
  Lease acquire(int64_t bytes, const std::function<bool()>& abandoned);
  /// Wakes every waiter of acquire() to ask its `abandoned` again (thread-safe).
  void wake();

  /// The budget in bytes, as constructed.
  int64_t capacity() const { return capacity_; }
  /// Bytes held by live leases now (thread-safe).
  int64_t reserved() const;

 private:
  void release(int64_t bytes);
  void report();   // with mutex_ held
  void advance();  // with mutex_ held: past the abandoned tickets whose turn came

  const int64_t capacity_;
  monitoring::ServeMetrics* metrics_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int64_t reserved_ = 0;
  uint64_t next_ticket_ = 0, serving_ = 0;  // FIFO: a ticket waits until it is served
  int64_t waiting_ = 0;
  std::vector<uint64_t> skipped_;  // tickets abandoned before their turn
};

}  // namespace olmo2
