#include "runtime/serve/api/activation_budget.h"

#include <chrono>

#include "core/error.h"

namespace olmo2 {

ActivationBudget::ActivationBudget(int64_t capacity, monitoring::ServeMetrics* metrics)
    : capacity_(capacity), metrics_(metrics) {
  OLMO2_CHECK(capacity > 0, "activation budget of ", capacity, " bytes");
  std::lock_guard<std::mutex> lock(mutex_);
  report();
}

ActivationBudget::Lease& ActivationBudget::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    if (budget_) budget_->release(bytes_);
    budget_ = o.budget_, bytes_ = o.bytes_;
    o.budget_ = nullptr;
  }
  return *this;
}

ActivationBudget::Lease::~Lease() {
  if (budget_) budget_->release(bytes_);
}

ActivationBudget::Lease ActivationBudget::acquire(int64_t bytes, const std::function<bool()>& abandoned) {
  OLMO2_CHECK(bytes >= 0, "activation reservation of ", bytes, " bytes");
  if (bytes == 0) return {};
  if (bytes > capacity_) {
    OLMO2_THROW(InputError, "activations: this request could return ", bytes,
                " bytes, more than the whole server's --max-activation-memory ", capacity_,
                ": ask for fewer names, layers or positions, a reduction, or fewer tokens");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t ticket = next_ticket_++;
  ++waiting_;
  report();
  for (;;) {
    if (ticket == serving_ && reserved_ + bytes <= capacity_) break;
    if (abandoned && abandoned()) {
      // Give up the place in line: the tickets behind it move up.
      --waiting_;
      if (ticket == serving_) ++serving_;
      else skipped_.push_back(ticket);
      advance();
      report();
      cv_.notify_all();
      return {};
    }
    cv_.wait(lock);
  }
  reserved_ += bytes;
  --waiting_;
  ++serving_;
  advance();
  report();
  cv_.notify_all();
  return Lease(this, bytes);
}

void ActivationBudget::advance() {
  // Tickets abandoned while waiting are skipped when their turn comes.
  for (bool moved = true; moved;) {
    moved = false;
    for (auto it = skipped_.begin(); it != skipped_.end(); ++it) {
      if (*it == serving_) {
        ++serving_;
        skipped_.erase(it);
        moved = true;
        break;
      }
    }
  }
}

void ActivationBudget::wake() {
  // Under the lock: a waiter between asking `abandoned` and waiting cannot miss it.
  std::lock_guard<std::mutex> lock(mutex_);
  cv_.notify_all();
}

int64_t ActivationBudget::reserved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_;
}

void ActivationBudget::release(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reserved_ -= bytes;
    report();
  }
  cv_.notify_all();
}

void ActivationBudget::report() {
  if (metrics_) metrics_->activation_memory(reserved_, waiting_);
}

}  // namespace olmo2
