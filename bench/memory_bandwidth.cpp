// Read and copy bandwidth (bench/memory_bandwidth.h).
#include "bench/memory_bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace olmo2::bench {
namespace {

using Clock = std::chrono::steady_clock;

/// Sum of the 64-bit words of [p, p + n) (n a multiple of 128 bytes), four independent
/// 32-byte accumulators so that the loads, not the adds, set the pace.
__attribute__((target("avx2"))) uint64_t sum_avx2(const char* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t sum_portable(const char* p, size_t n) {
  uint64_t a[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    for (int j = 0; j < 4; ++j) a[j] += w[j];
  }
  return a[0] + a[1] + a[2] + a[3];
}

/// Runs `body(lo, hi, thread)` over `threads` contiguous chunks of [0, n) (chunks a
/// multiple of `align` bytes) on as many std::threads; returns the wall seconds.
double timed_split(size_t n, int threads, size_t align, const std::function<void(size_t, size_t, int)>& body) {
  const size_t chunk = (n / static_cast<size_t>(threads)) / align * align;
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    const size_t lo = chunk * static_cast<size_t>(t), hi = t + 1 == threads ? n : lo + chunk;
    pool.emplace_back(body, lo, hi, t);
  }
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Bandwidth summarize(std::vector<double> seconds, double bytes_per_run, const char* loads) {
  std::sort(seconds.begin(), seconds.end());
  return {bytes_per_run / seconds.front(), bytes_per_run / seconds[seconds.size() / 2], loads};
}

}  // namespace

Bandwidth read_bandwidth(int64_t bytes, int threads, int reps) {
  threads = std::max(1, threads);
  const size_t n = bytes > 0 ? static_cast<size_t>(bytes) / (128u * static_cast<size_t>(threads)) * 128u *
                                   static_cast<size_t>(threads)
                             : 0;
  if (n == 0 || reps < 1) return {};
  const bool avx2 = __builtin_cpu_supports("avx2");
  std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(std::aligned_alloc(64, n)), &std::free);
  if (!buf) throw std::runtime_error("read_bandwidth: cannot allocate " + std::to_string(n) + " bytes");
  for (size_t i = 0; i < n; i += 8) {  // every page touched; words that differ
    const uint64_t v = i * 0x9E3779B97F4A7C15ull;
    std::memcpy(buf.get() + i, &v, 8);
  }
  std::vector<double> seconds;
  uint64_t first = 0;
  for (int r = 0; r <= reps; ++r) {  // r = 0: warm-up
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    const double s = timed_split(n, threads, 128, [&](size_t lo, size_t hi, int t) {
      sums[static_cast<size_t>(t)] = avx2 ? sum_avx2(buf.get() + lo, hi - lo) : sum_portable(buf.get() + lo, hi - lo);
    });
    uint64_t total = 0;
    for (uint64_t x : sums) total += x;
    if (r == 0) first = total;
    else if (total != first) throw std::runtime_error("read_bandwidth: the buffer's sum changed between runs");
    if (r > 0) seconds.push_back(s);
  }
  return summarize(seconds, static_cast<double>(n), avx2 ? "avx2" : "portable");
}

Bandwidth copy_bandwidth(int64_t bytes, int threads, int reps) {
  threads = std::max(1, threads);
  if (bytes <= 0 || reps < 1) return {};
  const size_t n = static_cast<size_t>(bytes);
  std::unique_ptr<char[]> a(new char[n]), b(new char[n]);
  std::memset(a.get(), 1, n);  // touch every page before timing
  std::memset(b.get(), 2, n);
  std::vector<double> seconds;
  for (int r = 0; r <= reps; ++r) {
    const double s = timed_split(n, threads, 64, [&](size_t lo, size_t hi, int) { std::memcpy(b.get() + lo, a.get() + lo, hi - lo); });
    if (r > 0) seconds.push_back(s);
  }
  volatile char sink = b[n / 2];  // keep the copies
  (void)sink;
  return summarize(seconds, 2.0 * static_cast<double>(n), "memcpy");
}

}  // namespace olmo2::bench
