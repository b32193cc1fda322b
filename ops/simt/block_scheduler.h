// The per-block half of the SIMT executor (ops/simt/executor.h): the fibers of one
// block, the barrier and warp-exchange rules, and the shuffled order. Internal to
// ops/simt/.
#pragma once

#include <boost/context/fiber.hpp>

#include <cstdint>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "ops/simt/executor.h"

namespace olmo2::simt::detail {

/// Where a thread of the block stands between two scheduler rounds.
enum class LaneState : uint8_t { Ready, AtBarrier, AtWarpExchange, Exited };

/// One GPU thread: its fiber, where it waits, and its part in a pending warp exchange.
struct Lane {
  Dim3 idx;
  int linear = 0;  // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
  boost::context::fiber self;       // resumes this thread
  boost::context::fiber scheduler;  // resumes the scheduler (valid while this thread runs)
  LaneState state = LaneState::Ready;
  const char* site = "";
  WarpOp op = WarpOp::ShflIdx;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int arg = 0, width = 32;
};

/// Fiber stacks (mmap'd, with a guard page) kept for reuse across blocks and launches:
/// one cache serves every worker of every launch (take and give lock), so a suite's
/// thousands of launches map, fault in and unmap no stack after the first.
class StackCache {
 public:
  explicit StackCache(size_t stack_bytes) : bytes_(stack_bytes) {}
  ~StackCache();
  StackCache(const StackCache&) = delete;
  StackCache& operator=(const StackCache&) = delete;
  boost::context::stack_context take();
  void give(boost::context::stack_context sc);

 private:
  std::mutex mu_;
  size_t bytes_;
  std::vector<boost::context::stack_context> free_;
};

/// Runs every thread of block `block_index` of a launch to completion on the calling OS
/// thread. Throws ExecutionError for a broken rule, or what a thread threw.
void run_block(const LaunchConfig& config, const char* kernel_name, const Dim3& block_index, uint64_t seed,
               StackCache& stacks, const std::function<void()>& thread_body);

// The running thread's view (throw ExecutionError outside a launch).
const Dim3& current_thread_idx();
const Dim3& current_block_idx();
const Dim3& current_block_dim();
const Dim3& current_grid_dim();
void* current_dynamic_shared();
/// Suspends the running thread at the barrier `site` until the scheduler releases it.
void wait_at_barrier(const char* site);
/// Suspends the running thread in a warp exchange; returns its result.
uint64_t wait_at_warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* site);

}  // namespace olmo2::simt::detail
