// The CPU thread count (ops/threads.h; docs/architecture.md §1): set_num_threads reaches
// the OpenMP regions the kernels open and OpenBLAS, and refuses a count below 1 naming it.
//
// What a kernel really ran with is observed, not inferred from its results: GCC compiles
// `#pragma omp parallel` (with or without `for schedule(static)`) into a call to libgomp's
// GOMP_parallel(fn, data, num_threads, flags). This test binary defines that symbol, so
// the calls of olmo2_ops (linked in statically) and of OpenBLAS's OpenMP build (resolved
// through the executable first) come here; it records the size of the team each region
// ran with, from inside the region (omp_get_num_threads()), and forwards to libgomp's.
// Its own binary, so that no other test runs through the interposer.
#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/threads.h"
#include "tests/ops/random_tensor.h"
#include "tests/test_util.h"

namespace {

std::mutex g_teams_mutex;
std::vector<int> g_teams;  // team size of every parallel region since the last take_teams()

struct Region {
  void (*fn)(void*);
  void* data;
};

void run_recorded(void* p) {
  const Region* r = static_cast<const Region*>(p);
  if (omp_get_thread_num() == 0) {
    std::lock_guard<std::mutex> lock(g_teams_mutex);
    g_teams.push_back(omp_get_num_threads());
  }
  r->fn(r->data);
}

}  // namespace

extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  using Real = void (*)(void (*)(void*), void*, unsigned, unsigned);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "GOMP_parallel"));
  if (!real) std::abort();  // no libgomp behind us: nothing could run the region
  Region r{fn, data};
  real(run_recorded, &r, num_threads, flags);
}

namespace olmo2::ops {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

/// The team sizes recorded since the last call, and forgets them.
std::vector<int> take_teams() {
  std::lock_guard<std::mutex> lock(g_teams_mutex);
  std::vector<int> t;
  t.swap(g_teams);
  return t;
}

/// Puts back OpenMP's and OpenBLAS's thread counts as they were at construction, when the
/// test ends, whether it passed or an assertion stopped it. OpenBLAS's OpenMP build sets
/// OpenMP's count too when its own is set, so OpenBLAS's goes back first.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : omp_(omp_get_max_threads()), blas_(openblas_get_num_threads()) {}
  ~ThreadCountGuard() {
    openblas_set_num_threads(blas_);
    omp_set_num_threads(omp_);
  }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int omp_, blas_;
};

// 64 × 512 = 32768 elements: above rmsnorm's 2^14 threshold for going parallel.
const int64_t kRows = 64, kWidth = 512;

TEST(Threads, KernelsAndOpenBlasRunWithTheSetCount) {
  ThreadCountGuard guard;
  const Tensor x = test::random_tensor({kRows, kWidth}, 15), w = test::random_tensor({kWidth}, 16);
  const Tensor a = test::random_tensor({256, 256}, 17), b = test::random_tensor({256, 256}, 18);
  std::vector<Tensor> outs;
  // 3 is neither this machine's core count (2) nor OpenMP's default here.
  for (int n : {1, 3, 2}) {
    set_num_threads(n);
    EXPECT_EQ(num_threads(), n);
    EXPECT_EQ(openblas_get_num_threads(), n) << "OpenBLAS's own count";
    take_teams();
    outs.push_back(Tensor::zeros({kRows, kWidth}));
    rmsnorm(x.view(), w.view(), 1e-6f, outs.back().view());
    const std::vector<int> norm_teams = take_teams();
    ASSERT_EQ(norm_teams.size(), 1u) << "rmsnorm of " << kRows << " × " << kWidth << " at " << n
                                     << " threads opened no OpenMP region (or several)";
    EXPECT_EQ(norm_teams[0], n) << "rmsnorm's region ran with another team size than the set count";
    // OpenBLAS's sgemm (256³ multiply-adds: above its threshold for threading).
    Tensor y = Tensor::zeros({256, 256});
    linear(a.view(), b.view(), y.view());
    const std::vector<int> gemm_teams = take_teams();
    EXPECT_THAT(gemm_teams, Each(n)) << "OpenBLAS's regions at " << n << " threads";
    if (n > 1) {
      EXPECT_FALSE(gemm_teams.empty()) << "OpenBLAS's sgemm did not go parallel at " << n << " threads";
    }
  }
  // Rows are independent: the result does not depend on the thread count.
  for (size_t k = 1; k < outs.size(); ++k)
    for (int64_t i = 0; i < outs[0].numel(); ++i) ASSERT_EQ(outs[k].f32()[i], outs[0].f32()[i]) << k << " " << i;
}

TEST(Threads, CountsBelowOneAreRefusedNamingThem) {
  ThreadCountGuard guard;
  set_num_threads(3);
  for (int bad : {0, -2}) {
    EXPECT_THAT(olmo2::test::input_error([&] { set_num_threads(bad); }), HasSubstr("got " + std::to_string(bad)));
    EXPECT_EQ(num_threads(), 3) << "a refused count changed OpenMP's";
    EXPECT_EQ(openblas_get_num_threads(), 3) << "a refused count changed OpenBLAS's";
  }
}

// The guard's own check: a test that fails with the count changed still leaves it as
// it was for the tests after it.
void fails_with_five_threads() {
  ThreadCountGuard guard;
  set_num_threads(5);
  FAIL() << "deliberate failure at 5 threads";
}

TEST(Threads, GuardRestoresTheCountWhenAnAssertionFails) {
  const int omp_before = omp_get_max_threads(), blas_before = openblas_get_num_threads();
  EXPECT_FATAL_FAILURE(fails_with_five_threads(), "deliberate failure at 5 threads");
  EXPECT_EQ(omp_get_max_threads(), omp_before);
  EXPECT_EQ(openblas_get_num_threads(), blas_before);
  ASSERT_NE(omp_before, 5) << "the check above shows nothing when the count was 5 already";
}

}  // namespace
}  // namespace olmo2::ops
