// The SIMT executor: runs CUDA kernels, compiled as host C++, on the CPU, one fiber per
// GPU thread (docs/architecture.md §10, "the CUDA backend on the CPU"). Test-only: it
// exists so that the kernel source of ops/cuda/ executes in every CI run, with the
// GPU's synchronisation rules enforced (block barriers, warp-synchronous exchanges with
// their masks, launch limits) and the order of a block's threads between two
// synchronisation points shuffled with a seed, so that a missing barrier or a read of
// another thread's unsynchronised write changes the result.
//
// Semantics follow the CUDA C++ Programming Guide (execution configuration, __syncthreads,
// warp shuffle / vote / match functions, compute-capability limits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace olmo2::simt {

/// A grid or block extent, or a thread or block index (CUDA's dim3 / uint3).
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr Dim3() = default;
  constexpr Dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr uint64_t volume() const { return uint64_t{x} * y * z; }
};

/// A kernel broke a rule of the GPU's execution model (divergent barrier or warp
/// exchange, a launch over the limits, a lane named in a mask that does not exist).
/// what() names the rule, the block and threads involved, and the shuffle seed.
class ExecutionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The launch limits of compute capability 8.0 and 9.0 (CUDA C++ Programming Guide,
/// "Features and Technical Specifications").
inline constexpr unsigned kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxGridYZ = 65535;
inline constexpr uint64_t kMaxGridX = 2147483647;
inline constexpr size_t kDefaultDynamicSharedLimit = 48 * 1024;
inline constexpr size_t kMaxDynamicShared = 227 * 1024;
inline constexpr int kWarpSize = 32;

/// One kernel launch: grid and block extents, the dynamic shared memory per block in
/// bytes, and the largest dynamic shared memory the kernel was allowed by
/// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) (48 KiB without).
struct LaunchConfig {
  Dim3 grid, block;
  size_t dynamic_shared = 0;
  size_t dynamic_shared_limit = kDefaultDynamicSharedLimit;
};

/// Checks `config` against the GPU's limits; throws ExecutionError naming the value
/// that breaks one (block over 1,024 threads, a zero extent, grid y or z over 65,535,
/// dynamic shared memory over the kernel's limit).
void check_launch(const LaunchConfig& config, const char* kernel_name);

/// Runs `thread_body` once per GPU thread of the grid: each block on an OS thread of
/// its own (fresh thread-local storage, so a block's static __shared__ starts zeroed),
/// up to hardware_concurrency() blocks at once, each of its threads a fiber. Inside
/// thread_body the accessors below give the thread's indices. Dynamic shared memory is
/// filled with a NaN pattern before each block. Throws ExecutionError (the first one
/// any block raised) after every block has stopped; exceptions thrown by thread_body
/// propagate the same way.
void run_grid(const LaunchConfig& config, const char* kernel_name, const std::function<void()>& thread_body);

/// "file:line" of `at`, interned (the pointer stays valid): the site the executor's
/// error messages name.
const char* site_name(const std::source_location& at);

// With OLMO2_SIMT_STATS=1 the process prints, at exit, how many times each kernel (by
// the name its launch gave: the kernel expression and its file:line in ops/cuda/) ran on
// the executor; with OLMO2_SIMT_STATS=PATH (an absolute path) it appends one line per
// launch name, "count<TAB>name", to PATH instead (each line one write on an O_APPEND
// file, so ranks and test processes may share it: tests/gpu_on_cpu/launch_sites.py).

/// The shuffle seed of the next launches (default from $OLMO2_SIMT_SEED, else a fixed
/// value); each block derives its own stream from it and its block index.
void set_seed(uint64_t seed);
uint64_t seed();

// --- What a running thread sees (valid only inside thread_body) ---------------------

const Dim3& thread_idx();
const Dim3& block_idx();
const Dim3& block_dim();
const Dim3& grid_dim();
/// The block's dynamic shared memory (extern __shared__), aligned to 16 bytes.
void* dynamic_shared();

/// __syncthreads(): waits until every thread of the block reaches a barrier. Throws
/// ExecutionError (in the launching thread) when part of the block reaches it and the
/// rest has exited or waits in a warp exchange, or when threads wait at different
/// barriers (`site` names this one).
void syncthreads(const char* site);

/// The kinds of warp exchange, as the CUDA intrinsics of the same names.
enum class WarpOp : uint8_t { ShflIdx, ShflXor, ShflDown, ShflUp, Ballot, MatchAny };

/// One lane's part in a warp exchange: waits until every lane named in `mask` has
/// reached an exchange of the same kind with the same mask, then returns this lane's
/// result. For the shuffles `value` holds the lane's variable (up to 8 bytes) and the
/// result the source lane's; `arg` is the source lane, xor mask or delta; `width` the
/// shuffle segment (a power of two ≤ 32). For Ballot `value` is the predicate and the
/// result the lanes of `mask` whose predicate is nonzero; for MatchAny the lanes of
/// `mask` with the same value. Throws ExecutionError (in the launching thread) when this
/// lane is not in `mask`, `mask` names a lane that is outside the block, has exited, or
/// waits elsewhere, or a shuffle reads a lane outside `mask`.
uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* site);

/// Shuffles of any trivially copyable value of up to 8 bytes (CUDA's __shfl_*_sync).
template <typename T>
T shuffle(WarpOp op, unsigned mask, T v, int arg, int width, const char* site) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle of a value over 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(op, mask, bits, arg, width, site);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace olmo2::simt
