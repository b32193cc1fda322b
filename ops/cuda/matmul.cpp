// cuBLASLt products with cached descriptors and algorithms (ops/cuda/matmul.h).
#include "ops/cuda/matmul.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/runtime.h"

namespace olmo2::ops::cuda::detail {
namespace {

struct DescFree {
  void operator()(cublasLtMatmulDesc_t p) const { cublasLtMatmulDescDestroy(p); }
};
struct LayoutFree {
  void operator()(cublasLtMatrixLayout_t p) const { cublasLtMatrixLayoutDestroy(p); }
};
struct PrefFree {
  void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using DescPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, DescFree>;
using LayoutPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LayoutFree>;
using PrefPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, PrefFree>;

// The operation descriptor and the layouts of A, B and D (C is D) of one problem.
struct Problem {
  DescPtr desc;
  LayoutPtr a, b, d;
};

// A cached problem with the algorithm it runs.
struct Plan {
  Problem problem;
  cublasLtMatmulAlgo_t algo{};
};

// The largest power of two ≤ 256 dividing the address: what the heuristic may assume.
uint32_t alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && u % a != 0) a >>= 1;
  return a;
}

LayoutPtr layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  OLMO2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  return LayoutPtr(l);
}

Problem make_problem(const MatOperand& a, const MatOperand& b, int64_t m, int64_t n, int64_t d_ld) {
  Problem p;
  cublasLtMatmulDesc_t desc = nullptr;
  OLMO2_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  p.desc.reset(desc);
  const int32_t ta = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  OLMO2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  OLMO2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  p.a = layout(a.type, a.rows, a.cols, a.ld);
  p.b = layout(b.type, b.rows, b.cols, b.ld);
  p.d = layout(CUDA_R_32F, m, n, d_ld);
  return p;
}

std::vector<cublasLtMatmulHeuristicResult_t> heuristics(const Problem& p, uint32_t align_a, uint32_t align_b,
                                                        uint32_t align_d, int want) {
  cublasLtMatmulPreference_t raw = nullptr;
  OLMO2_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw));
  const PrefPtr pref(raw);
  size_t ws_bytes = 0;
  cublaslt_workspace(&ws_bytes);
  const uint64_t ws = ws_bytes;
  OLMO2_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
  for (const auto& [attr, value] : aligns)
    OLMO2_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(raw, attr, &value, sizeof(value)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(want));
  int returned = 0;
  OLMO2_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), p.desc.get(), p.a.get(), p.b.get(), p.d.get(),
                                                    p.d.get(), raw, want, results.data(), &returned));
  results.resize(static_cast<size_t>(returned));
  return results;
}

bool algo_applies(const Problem& p, const cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulHeuristicResult_t r{};
  if (cublasLtMatmulAlgoCheck(cublaslt_handle(), p.desc.get(), p.a.get(), p.b.get(), p.d.get(), p.d.get(), &algo,
                              &r) != CUBLAS_STATUS_SUCCESS)
    return false;
  size_t ws_bytes = 0;
  cublaslt_workspace(&ws_bytes);
  return r.workspaceSize <= ws_bytes;
}

// The reference problem of FixedPerA with `n` columns of B: B in its tightest layout
// and minimal alignment (bf16 B: rows of 16 bytes, see matmul.h), D tight.
Problem reference_problem(const MatOperand& a, const MatOperand& b, int64_t m, int64_t k, int64_t n) {
  const bool bf16 = b.type == CUDA_R_16BF;
  const int64_t ld_k = bf16 ? (k + 7) / 8 * 8 : k;
  MatOperand ref = b;
  ref.rows = b.trans ? n : k;
  ref.cols = b.trans ? k : n;
  ref.ld = b.trans ? n : ld_k;
  return make_problem(a, ref, m, n, m);
}

// The batch sizes (B's column counts) a pinned algorithm must run for: every one up to
// 4,096 (decode batches and prefill chunks), then every 64th up to 65,536.
std::vector<int64_t> checked_batches() {
  std::vector<int64_t> n;
  for (int64_t i = 1; i <= 4096; ++i) n.push_back(i);
  for (int64_t i = 4096 + 64; i <= 65536; i += 64) n.push_back(i);
  return n;
}

// The FixedPerA algorithm for A and op(A)'s sizes: the first heuristic answer for the
// reference problem with kInvariantRefCols columns that, forced to one K split and no
// reduction scheme, runs for every checked batch size. None (the caller falls back to
// the fixed-order kernel) when no answer does.
std::optional<cublasLtMatmulAlgo_t> choose_fixed_algo(const MatOperand& a, const MatOperand& b, int64_t m, int64_t k) {
  const bool bf16 = b.type == CUDA_R_16BF;
  const Problem p = reference_problem(a, b, m, k, kInvariantRefCols);
  static const std::vector<int64_t> batches = checked_batches();
  for (const auto& r : heuristics(p, alignment(a.ptr), bf16 ? 16 : 4, 4, 16)) {
    cublasLtMatmulAlgo_t algo = r.algo;
    const int32_t one_split = 1;
    const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    OLMO2_CUBLAS_CHECK(
        cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one_split, sizeof(one_split)));
    OLMO2_CUBLAS_CHECK(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                            &no_reduction, sizeof(no_reduction)));
    if (!algo_applies(p, algo)) continue;
    bool every = true;
    for (int64_t n : batches) {
      if (!algo_applies(reference_problem(a, b, m, k, n), algo)) {
        every = false;
        break;
      }
    }
    if (every) return algo;
  }
  return std::nullopt;
}

using Key = std::tuple<bool, bool, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t, uint32_t,
                       uint32_t, bool, int>;
using FixedKey = std::tuple<bool, bool, int, int64_t, int64_t, int64_t, uint32_t>;

std::mutex g_mutex;
std::map<Key, std::unique_ptr<Plan>> g_plans;
std::map<FixedKey, std::optional<cublasLtMatmulAlgo_t>> g_fixed;

FixedKey fixed_key(const MatOperand& a, int64_t m, int64_t k) {
  return FixedKey{a.trans, false, static_cast<int>(a.type), m, k, a.ld, alignment(a.ptr)};
}

// The cached FixedPerA choice for A (g_mutex held).
const std::optional<cublasLtMatmulAlgo_t>& fixed_choice(const MatOperand& a, const MatOperand& b, int64_t m, int64_t k) {
  const FixedKey fkey = fixed_key(a, m, k);
  auto f = g_fixed.find(fkey);
  if (f == g_fixed.end()) f = g_fixed.emplace(fkey, choose_fixed_algo(a, b, m, k)).first;
  return f->second;
}

const Plan& plan_for(const MatOperand& a, const MatOperand& b, int64_t m, int64_t n, int64_t k, int64_t d_ld,
                     const void* d, float beta, AlgoChoice choice) {
  const uint32_t al_a = alignment(a.ptr), al_b = alignment(b.ptr), al_d = alignment(d);
  const bool fixed = choice == AlgoChoice::FixedPerA;
  // FixedPerA's algorithm must not depend on B or D, so neither does its key beyond sizes.
  const Key key{a.trans, b.trans, static_cast<int>(a.type), m, n, k, a.ld, b.ld, d_ld, al_a,
                fixed ? 0u : al_b, fixed ? 0u : al_d, beta != 0.0f, static_cast<int>(choice)};
  const std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  plan->problem = make_problem(a, b, m, n, d_ld);
  if (fixed) {
    const std::optional<cublasLtMatmulAlgo_t>& algo = fixed_choice(a, b, m, k);
    OLMO2_CHECK(algo.has_value(), "linear_batch_invariant: no cuBLASLt algorithm can be pinned for a ", m, " x ", k,
                " operand (the caller should have taken the fixed-order kernel)");
    plan->algo = *algo;
    OLMO2_CHECK(algo_applies(plan->problem, plan->algo), "linear_batch_invariant: the fixed cuBLASLt algorithm for ",
                m, " x ", k, " does not run with ", n, " rows (leading dimensions ", b.ld, ", ", d_ld, ")");
  } else {
    const auto results = heuristics(plan->problem, al_a, al_b, al_d, 1);
    OLMO2_CHECK(!results.empty(), "cuBLASLt found no algorithm for a ", m, " x ", n, " x ", k, " product");
    plan->algo = results[0].algo;
  }
  return *g_plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace

bool batch_invariant_algo_exists(const MatOperand& a, const MatOperand& b, int64_t m, int64_t k) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return fixed_choice(a, b, m, k).has_value();
}

void matmul(const MatOperand& a, const MatOperand& b, float* d, int64_t d_rows, int64_t d_cols, int64_t d_ld,
            float beta, AlgoChoice choice) {
  const int64_t k = a.trans ? a.rows : a.cols;
  OLMO2_CHECK(a.type == b.type && (a.trans ? a.cols : a.rows) == d_rows && (b.trans ? b.rows : b.cols) == d_cols &&
                  (b.trans ? b.cols : b.rows) == k && d_ld >= d_rows && a.ld >= a.rows && b.ld >= b.rows,
              "cuda matmul: inconsistent operands");
  if (choice == AlgoChoice::FixedPerA && b.type == CUDA_R_16BF)
    OLMO2_CHECK(b.ld % 8 == 0 && alignment(b.ptr) >= 16, "cuda matmul: a batch-invariant bf16 B needs 16-byte rows");
  const Plan& plan = plan_for(a, b, d_rows, d_cols, k, d_ld, d, beta, choice);
  size_t ws_bytes = 0;
  void* ws = cublaslt_workspace(&ws_bytes);
  const float alpha = 1.0f;
  const Problem& p = plan.problem;
  OLMO2_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), p.desc.get(), &alpha, a.ptr, p.a.get(), b.ptr, p.b.get(), &beta,
                                    d, p.d.get(), d, p.d.get(), &plan.algo, ws, ws_bytes, compute_stream()));
}

}  // namespace olmo2::ops::cuda::detail
