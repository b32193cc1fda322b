// Wall time per public op, for benchmarks that name where a step's time goes
// (docs/architecture.md §2 "Op profile"). Off by default; while off, each op pays one
// relaxed atomic load. While on, every public op of the op table (ops/dispatch.cpp) and
// every OpProfileScope adds its wall time and one call to its name's total; an op called
// inside another timed op counts only in the outer one (per thread), so the totals add
// up to time spent in ops without double counting. Times are host wall clock: on the
// CPU the op's work; for a GPU op, only its launch (the work shows in the op that waits).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace olmo2::ops {

/// Starts (true) or stops (false) the profile; the totals are kept until taken.
void set_op_profiling(bool on);
/// Whether the profile is on.
bool op_profiling();

/// One op's totals since the last take_op_profile.
struct OpTime {
  std::string op;
  double seconds = 0;
  int64_t calls = 0;
};
/// The totals, largest time first, and resets them to zero.
std::vector<OpTime> take_op_profile();

/// Times the enclosing scope as op `op` (a string that outlives the profile: a literal)
/// while the profile is on — for an op outside the op table, e.g. linear_quantized.
class OpProfileScope {
 public:
  explicit OpProfileScope(const char* op);
  ~OpProfileScope();
  OpProfileScope(const OpProfileScope&) = delete;
  OpProfileScope& operator=(const OpProfileScope&) = delete;

 private:
  const char* op_ = nullptr;  ///< null: not timed (profile off, or nested in a timed op)
  bool counted_ = false;      ///< this scope raised the thread's depth
  int64_t start_ns_ = 0;
};

}  // namespace olmo2::ops
