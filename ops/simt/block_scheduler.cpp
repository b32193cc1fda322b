// One block of a SIMT launch on the CPU: its threads as fibers, run in a shuffled order
// until each waits at a barrier or a warp exchange, then the barrier or exchange is
// checked against the GPU's rules and released (docs/architecture.md §10).
#include "ops/simt/block_scheduler.h"

#include <boost/context/protected_fixedsize_stack.hpp>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace olmo2::simt::detail {
namespace ctx = boost::context;

namespace {

/// What the running fiber's accessors read: set by the scheduler before each resume.
struct BlockView {
  LaunchConfig config;
  Dim3 block_idx;
  void* dynamic_shared = nullptr;
  std::vector<Lane>* lanes = nullptr;
  Lane* current = nullptr;
};
thread_local BlockView* t_view = nullptr;

BlockView& view() {
  if (t_view == nullptr || t_view->current == nullptr)
    throw ExecutionError("a GPU intrinsic was called outside a kernel launched on the SIMT executor");
  return *t_view;
}

/// Suspends the running thread; returns when the scheduler resumes it.
void yield_to_scheduler() {
  Lane& lane = *view().current;
  lane.scheduler = std::move(lane.scheduler).resume();
}

std::string where(const char* kernel, const Dim3& b, uint64_t seed) {
  std::ostringstream s;
  s << "kernel " << kernel << ", block (" << b.x << "," << b.y << "," << b.z << "), shuffle seed " << seed
    << " (set OLMO2_SIMT_SEED to replay)";
  return s.str();
}

std::string lane_name(const Lane& l) {
  std::ostringstream s;
  s << "thread (" << l.idx.x << "," << l.idx.y << "," << l.idx.z << ")";
  return s.str();
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::ShflIdx: return "__shfl_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::MatchAny: return "__match_any_sync";
  }
  return "?";
}

/// The lane a shuffle reads for `lane` (its own when the source leaves its segment).
int shuffle_source(const Lane& l, int lane) {
  const int w = l.width, base = lane & ~(w - 1), pos = lane & (w - 1);
  switch (l.op) {
    case WarpOp::ShflIdx: return base + (((l.arg % w) + w) % w);
    case WarpOp::ShflXor: {
      const int src = lane ^ l.arg;
      return (src < 0 || src >= base + w || src >= kWarpSize) ? lane : src;
    }
    case WarpOp::ShflDown: return pos + l.arg >= w ? lane : lane + l.arg;
    case WarpOp::ShflUp: return pos < l.arg ? lane : lane - l.arg;
    default: return lane;
  }
}

class Scheduler {
 public:
  Scheduler(BlockView& v, const char* kernel, uint64_t seed) : v_(v), kernel_(kernel), seed_(seed) {}

  /// Releases every warp exchange whose lanes have all arrived; true if any was.
  bool release_warp_exchanges() {
    std::vector<Lane>& lanes = *v_.lanes;
    bool any = false;
    for (size_t warp0 = 0; warp0 < lanes.size(); warp0 += kWarpSize) {
      const int n = static_cast<int>(std::min<size_t>(kWarpSize, lanes.size() - warp0));
      Lane* w = &lanes[warp0];
      unsigned done = 0;
      for (int i = 0; i < n; ++i) {
        if (w[i].state != LaneState::AtWarpExchange || (done >> i & 1u)) continue;
        const Lane& first = w[i];
        for (int j = 0; j < kWarpSize; ++j) {
          if (!(first.mask >> j & 1u)) continue;
          if (j >= n) fail(lane_name(first) + " at " + first.site + ": " + op_name(first.op) + " mask names lane " +
                           std::to_string(j) + ", which is outside the block");
          const Lane& o = w[j];
          if (o.state != LaneState::AtWarpExchange)
            fail(lane_name(first) + " at " + first.site + " waits in " + op_name(first.op) + " for lane " +
                 std::to_string(j) + ", which " +
                 (o.state == LaneState::Exited ? std::string("has exited")
                                               : std::string("waits at the barrier at ") + o.site) +
                 " (divergent warp exchange)");
          if (o.op != first.op || o.mask != first.mask)
            fail(lane_name(first) + " at " + first.site + " and " + lane_name(o) + " at " + o.site +
                 " meet in different warp exchanges (" + op_name(first.op) + " mask " + hex(first.mask) + " vs " +
                 op_name(o.op) + " mask " + hex(o.mask) + ")");
        }
        for (int j = 0; j < n; ++j) {
          if (!(first.mask >> j & 1u)) continue;
          w[j].result = result_for(w, j);
          w[j].state = LaneState::Ready;
        }
        done |= first.mask;
        any = true;
      }
    }
    return any;
  }

  /// Releases the block barrier when every thread waits at it; fails when part of the
  /// block has exited or waits in a warp exchange.
  bool release_barrier() {
    std::vector<Lane>& lanes = *v_.lanes;
    const Lane* at = nullptr;
    const Lane* other = nullptr;
    size_t exited = 0;
    for (const Lane& l : lanes) {
      if (l.state == LaneState::AtBarrier) {
        if (at == nullptr) at = &l;
        else if (std::string(at->site) != l.site)
          fail(lane_name(*at) + " waits at the barrier at " + at->site + " and " + lane_name(l) + " at the barrier at " +
               l.site + " (threads of a block must reach the same __syncthreads)");
      } else if (l.state == LaneState::Exited) {
        ++exited;
        if (other == nullptr) other = &l;
      } else if (other == nullptr) {
        other = &l;
      }
    }
    if (at == nullptr) return false;
    if (other != nullptr)
      fail("the barrier at " + std::string(at->site) + " was reached by part of the block: " + lane_name(*at) +
           " waits there, " + lane_name(*other) +
           (other->state == LaneState::Exited ? std::string(" has exited")
                                              : std::string(" waits in ") + op_name(other->op) + " at " + other->site));
    for (Lane& l : lanes) l.state = LaneState::Ready;
    return true;
  }

  [[noreturn]] void fail(const std::string& what) { throw ExecutionError(what + " [" + where(kernel_, v_.block_idx, seed_) + "]"); }

 private:
  static std::string hex(unsigned m) {
    std::ostringstream s;
    s << "0x" << std::hex << m;
    return s.str();
  }

  uint64_t result_for(Lane* w, int j) {
    const Lane& l = w[j];
    if (l.op == WarpOp::Ballot || l.op == WarpOp::MatchAny) {
      uint64_t bits = 0;
      for (int k = 0; k < kWarpSize; ++k) {
        if (!(l.mask >> k & 1u)) continue;
        const bool set = l.op == WarpOp::Ballot ? w[k].value != 0 : w[k].value == l.value;
        if (set) bits |= uint64_t{1} << k;
      }
      return bits;
    }
    const int src = shuffle_source(l, j);
    if (src != j && !(l.mask >> src & 1u))
      fail(lane_name(l) + " at " + l.site + ": " + op_name(l.op) + " reads lane " + std::to_string(src) +
           ", which its mask " + hex(l.mask) + " does not name");
    return w[src].value;
  }

  BlockView& v_;
  const char* kernel_;
  uint64_t seed_;
};

struct CachedStack {
  StackCache* cache;
  ctx::stack_context allocate() { return cache->take(); }
  void deallocate(ctx::stack_context& sc) noexcept { cache->give(sc); }
};

}  // namespace

StackCache::~StackCache() {
  ctx::protected_fixedsize_stack alloc(bytes_);
  for (auto& sc : free_) alloc.deallocate(sc);
}

ctx::stack_context StackCache::take() {
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      const ctx::stack_context sc = free_.back();
      free_.pop_back();
      return sc;
    }
  }
  return ctx::protected_fixedsize_stack(bytes_).allocate();
}

void StackCache::give(ctx::stack_context sc) {
  std::lock_guard lock(mu_);
  free_.push_back(sc);
}

void run_block(const LaunchConfig& config, const char* kernel_name, const Dim3& block_index, uint64_t seed,
               StackCache& stacks, const std::function<void()>& thread_body) {
  const Dim3& bd = config.block;
  // Dynamic shared memory: all-ones bytes, a NaN as f32, bf16 and f16.
  const size_t shared_bytes = (config.dynamic_shared + 63) / 64 * 64;
  std::unique_ptr<void, decltype(&std::free)> shared(shared_bytes ? std::aligned_alloc(64, shared_bytes) : nullptr,
                                                      &std::free);
  if (shared) std::memset(shared.get(), 0xff, shared_bytes);
  std::exception_ptr thrown;
  // Declared last, destroyed first: a fiber still suspended (after a failure) is
  // unwound while everything it may touch is alive.
  std::vector<Lane> lanes(bd.volume());
  BlockView v{config, block_index, shared.get(), &lanes, nullptr};
  for (size_t i = 0; i < lanes.size(); ++i) {
    Lane& l = lanes[i];
    l.linear = static_cast<int>(i);
    l.idx = Dim3(static_cast<unsigned>(i % bd.x), static_cast<unsigned>(i / bd.x % bd.y),
                 static_cast<unsigned>(i / (uint64_t{bd.x} * bd.y)));
    l.self = ctx::fiber(std::allocator_arg, CachedStack{&stacks}, [&l, &thrown, &thread_body](ctx::fiber&& sched) {
      l.scheduler = std::move(sched);
      try {
        thread_body();
      } catch (const ctx::detail::forced_unwind&) {
        throw;
      } catch (...) {
        if (!thrown) thrown = std::current_exception();
      }
      l.state = LaneState::Exited;
      return std::move(l.scheduler);
    });
  }

  BlockView* const saved = t_view;
  t_view = &v;
  struct Restore {
    BlockView* saved;
    ~Restore() { t_view = saved; }
  } restore{saved};

  Scheduler sched(v, kernel_name, seed);
  std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * (1 + block_index.x + 65536ull * (block_index.y + 65536ull * block_index.z))));
  std::vector<size_t> order;
  for (;;) {
    order.clear();
    for (size_t i = 0; i < lanes.size(); ++i)
      if (lanes[i].state == LaneState::Ready) order.push_back(i);
    if (!order.empty()) {
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t i : order) {
        v.current = &lanes[i];
        lanes[i].self = std::move(lanes[i].self).resume();
        v.current = nullptr;
        if (thrown) std::rethrow_exception(thrown);
      }
      continue;
    }
    if (sched.release_warp_exchanges()) continue;
    if (sched.release_barrier()) continue;
    const auto waiting = std::find_if(lanes.begin(), lanes.end(), [](const Lane& l) { return l.state != LaneState::Exited; });
    if (waiting == lanes.end()) break;
    sched.fail(lane_name(*waiting) + " waits forever at " + waiting->site);
  }
}

// --- The intrinsics' side: record where the running thread waits, then yield. ---------

const Dim3& current_thread_idx() { return view().current->idx; }
const Dim3& current_block_idx() { return view().block_idx; }
const Dim3& current_block_dim() { return view().config.block; }
const Dim3& current_grid_dim() { return view().config.grid; }
void* current_dynamic_shared() { return view().dynamic_shared; }

void wait_at_barrier(const char* site) {
  Lane& l = *view().current;
  l.state = LaneState::AtBarrier;
  l.site = site;
  yield_to_scheduler();
}

uint64_t wait_at_warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* site) {
  Lane& l = *view().current;
  const int lane = l.linear % kWarpSize;
  if (!(mask >> lane & 1u))
    throw ExecutionError(lane_name(l) + " at " + site + " calls " + op_name(op) + " with mask " + std::to_string(mask) +
                         ", which does not name its own lane " + std::to_string(lane));
  if (width < 1 || width > kWarpSize || (width & (width - 1)) != 0)
    throw ExecutionError(lane_name(l) + " at " + site + ": " + op_name(op) + " width " + std::to_string(width) +
                         " is not a power of two up to 32");
  l.state = LaneState::AtWarpExchange;
  l.op = op;
  l.mask = mask;
  l.value = value;
  l.arg = arg;
  l.width = width;
  l.site = site;
  yield_to_scheduler();
  return l.result;
}

}  // namespace olmo2::simt::detail
