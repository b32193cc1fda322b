// The grid half of the SIMT executor: launch limits, the shuffle seed, and blocks spread
// over OS threads (docs/architecture.md §10).
#include "ops/simt/executor.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <source_location>
#include <vector>

#include "ops/simt/block_scheduler.h"

namespace olmo2::simt {
namespace {

// Big enough for the kernels' per-thread arrays; only the pages a thread touches are
// committed.
constexpr size_t kFiberStackBytes = 256 * 1024;

uint64_t seed_from_environment() {
  const char* s = std::getenv("OLMO2_SIMT_SEED");
  if (s == nullptr || *s == '\0') return 0x5eed0f0126ull;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 0);
  if (end == s || *end != '\0') throw ExecutionError(std::string("OLMO2_SIMT_SEED=") + s + " is not an integer");
  return v;
}

std::atomic<uint64_t>& seed_slot() {
  static std::atomic<uint64_t> slot{seed_from_environment()};
  return slot;
}

}  // namespace

void set_seed(uint64_t s) { seed_slot().store(s); }
uint64_t seed() { return seed_slot().load(); }

void check_launch(const LaunchConfig& c, const char* kernel) {
  const std::string k = std::string("launch of ") + kernel + ": ";
  auto extent = [](const Dim3& d) {
    std::ostringstream s;
    s << "(" << d.x << "," << d.y << "," << d.z << ")";
    return s.str();
  };
  if (c.block.x == 0 || c.block.y == 0 || c.block.z == 0 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0)
    throw ExecutionError(k + "grid " + extent(c.grid) + " or block " + extent(c.block) +
                         " has a zero extent (cudaErrorInvalidConfiguration)");
  if (c.block.volume() > kMaxThreadsPerBlock || c.block.z > 64)
    throw ExecutionError(k + "block " + extent(c.block) + " has more than 1024 threads or z over 64" +
                         " (cudaErrorInvalidConfiguration)");
  if (c.grid.x > kMaxGridX || c.grid.y > kMaxGridYZ || c.grid.z > kMaxGridYZ)
    throw ExecutionError(k + "grid " + extent(c.grid) + " has y or z over 65535 (cudaErrorInvalidConfiguration)");
  if (c.dynamic_shared > c.dynamic_shared_limit)
    throw ExecutionError(k + std::to_string(c.dynamic_shared) + " bytes of dynamic shared memory, over the kernel's " +
                         std::to_string(c.dynamic_shared_limit) +
                         " (more than 48 KiB needs cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize))");
}

namespace {

/// Launches per kernel name, printed at exit when OLMO2_SIMT_STATS=1 (what a suite ran).
struct LaunchStats {
  std::mutex mu;
  std::map<std::string, uint64_t> launches;
  ~LaunchStats() {
    const char* on = std::getenv("OLMO2_SIMT_STATS");
    if (on == nullptr) return;
    if (on[0] == '/') {
      const int fd = ::open(on, O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0) {
        std::fprintf(stderr, "SIMT executor: cannot append the launch counts to %s\n", on);
        return;
      }
      for (const auto& [name, n] : launches) {
        const std::string line = std::to_string(n) + "\t" + name + "\n";
        if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) break;
      }
      ::close(fd);
      return;
    }
    if (std::string(on) != "1") return;
    uint64_t total = 0;
    for (const auto& [name, n] : launches) total += n;
    std::fprintf(stderr, "SIMT executor: %llu launches of %zu kernels\n", static_cast<unsigned long long>(total),
                 launches.size());
    for (const auto& [name, n] : launches) std::fprintf(stderr, "  %8llu  %s\n", static_cast<unsigned long long>(n), name.c_str());
  }
};
LaunchStats& launch_stats() {
  static LaunchStats stats;
  return stats;
}

}  // namespace

void run_grid(const LaunchConfig& config, const char* kernel_name, const std::function<void()>& thread_body) {
  check_launch(config, kernel_name);
  {
    LaunchStats& st = launch_stats();
    std::lock_guard lock(st.mu);
    ++st.launches[kernel_name];
  }
  const uint64_t blocks = config.grid.volume();
  const uint64_t s = seed();
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::exception_ptr first;
  // One stack cache for the process's life (never destroyed: no launch outlives it).
  static detail::StackCache& stacks = *new detail::StackCache(kFiberStackBytes);
  auto worker = [&] {
    for (uint64_t b; !stop.load() && (b = next.fetch_add(1)) < blocks;) {
      const Dim3 idx(static_cast<unsigned>(b % config.grid.x), static_cast<unsigned>(b / config.grid.x % config.grid.y),
                     static_cast<unsigned>(b / (uint64_t{config.grid.x} * config.grid.y)));
      // A fresh OS thread per block: its static __shared__ (thread_local) starts zeroed,
      // never with what an earlier block left.
      std::thread block([&] {
        try {
          detail::run_block(config, kernel_name, idx, s, stacks, thread_body);
        } catch (...) {
          std::lock_guard lock(mu);
          if (!first) first = std::current_exception();
          stop.store(true);
        }
      });
      block.join();
    }
  };
  const uint64_t n = std::min<uint64_t>(blocks, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> workers;
  for (uint64_t i = 1; i < n; ++i) workers.emplace_back(worker);
  worker();
  for (auto& w : workers) w.join();
  if (first) std::rethrow_exception(first);
}

const char* site_name(const std::source_location& at) {
  struct Key {
    const char* file;
    unsigned line;
    bool operator==(const Key&) const = default;
  };
  struct Hash {
    size_t operator()(const Key& k) const { return std::hash<const void*>()(k.file) ^ (size_t{k.line} * 0x9e3779b97f4a7c15ull); }
  };
  thread_local std::unordered_map<Key, const char*, Hash> cache;
  const Key key{at.file_name(), at.line()};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  static std::mutex mu;
  static std::unordered_set<std::string> names;
  std::lock_guard lock(mu);
  const char* name = names.insert(std::string(at.file_name()) + ":" + std::to_string(at.line())).first->c_str();
  cache.emplace(key, name);
  return name;
}

const Dim3& thread_idx() { return detail::current_thread_idx(); }
const Dim3& block_idx() { return detail::current_block_idx(); }
const Dim3& block_dim() { return detail::current_block_dim(); }
const Dim3& grid_dim() { return detail::current_grid_dim(); }
void* dynamic_shared() { return detail::current_dynamic_shared(); }
void syncthreads(const char* site) { detail::wait_at_barrier(site); }
uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* site) {
  return detail::wait_at_warp_exchange(op, mask, value, arg, width, site);
}

}  // namespace olmo2::simt
