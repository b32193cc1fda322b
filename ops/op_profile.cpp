// Wall time per public op (ops/op_profile.h).
#include "ops/op_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>

namespace olmo2::ops {
namespace {

std::atomic<bool> g_on{false};
std::mutex g_mutex;
std::map<std::string, OpTime> g_totals;  // guarded by g_mutex
thread_local int t_depth = 0;            // timed scopes open on this thread

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void set_op_profiling(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool op_profiling() { return g_on.load(std::memory_order_relaxed); }

std::vector<OpTime> take_op_profile() {
  std::vector<OpTime> out;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    for (auto& [name, t] : g_totals) out.push_back(t);
    g_totals.clear();
  }
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

OpProfileScope::OpProfileScope(const char* op) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  counted_ = true;
  if (t_depth++ > 0) return;  // nested: the outer op's time holds it
  op_ = op;
  start_ns_ = now_ns();
}

OpProfileScope::~OpProfileScope() {
  if (!counted_) return;
  --t_depth;
  if (!op_) return;
  const double s = static_cast<double>(now_ns() - start_ns_) * 1e-9;
  const std::lock_guard<std::mutex> lock(g_mutex);
  OpTime& t = g_totals[op_];
  if (t.op.empty()) t.op = op_;
  t.seconds += s;
  ++t.calls;
}

}  // namespace olmo2::ops
