// The machine's memory bandwidth as the decode bound uses it (bench/README.md, "Against
// PyTorch", "The decode bound"): read bandwidth, the rate at which `threads` cores stream
// a buffer far larger than the caches into registers, and copy bandwidth (STREAM's Copy)
// for comparison. Benchmark helpers, not part of the library.
#pragma once

#include <cstdint>

namespace olmo2::bench {

/// Timings of one bandwidth measurement, bytes/s: the best and the median of `reps`
/// timed runs (after one untimed warm-up run).
struct Bandwidth {
  double best = 0, median = 0;
  const char* loads = "";  ///< how the buffer was read: "avx2" (32-byte loads) or "portable" (8-byte)
};

/// Read bandwidth: `bytes` (rounded down to a multiple of 128 · threads; ≥ 1 GiB to leave
/// the caches out) are written once (every page touched), then each run splits the buffer
/// into `threads` contiguous chunks, one per std::thread, each summed with 32-byte AVX2
/// loads into four independent accumulators (8-byte loads where the CPU lacks AVX2);
/// bytes counted: the buffer's size per run. The sums are kept (compared across runs,
/// std::runtime_error when they differ) so that no load is optimised away. bytes ≤ 0:
/// all zeros.
Bandwidth read_bandwidth(int64_t bytes, int threads, int reps);

/// Copy bandwidth: memcpy of `bytes` between two buffers split over `threads` threads,
/// counted as STREAM's Copy counts it (bytes read + bytes written = 2·bytes per run).
Bandwidth copy_bandwidth(int64_t bytes, int threads, int reps);

}  // namespace olmo2::bench
