// CUDA token embedding, forward and backward (ops/embedding.h, ops/backward.h;
// docs/architecture.md §2).
//
// embedding and embedding_backward check the ids before any write, as the CPU op does:
// the ids are copied to the host (a wait on the compute stream) and an id outside
// [0, V) is an InputError naming it and its position.
//
// The backward is deterministic and gives the CPU's bits: the host groups the token
// positions by table row (a stable sort, so each group is in increasing position), and
// one thread per (row, column) adds that row's dout values in that order into a register
// started from dtable, exactly the CPU's sequence of fp32 additions. No atomics, so no
// run-to-run variation; the cost is the ids' round trip to the host (n·4 bytes each way)
// and one synchronisation per call, small beside the [n, h] traffic.
#include <cuda_bf16.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/device_temp.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/runtime.h"
#include "ops/op_checks.h"

namespace olmo2::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float ld_f32(const float* p, int64_t i) { return p[i]; }
__device__ inline float ld_f32(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }

// out[i, :] = table[ids[i] − first_id, :] widened to f32, or zeros when outside the table.
template <typename T>
__global__ void gather_kernel(const int32_t* ids, int64_t n, const T* table, int64_t ldt, int64_t rows,
                              int64_t first_id, float* out, int64_t ldo, int64_t h) {
  const int64_t total = n * h;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / h, j = e - i * h;
    const int64_t r = static_cast<int64_t>(ids[i]) - first_id;
    out[i * ldo + j] = (r >= 0 && r < rows) ? ld_f32(table, r * ldt + j) : 0.0f;
  }
}

// groups: order[n_sel] (token positions), start[g_count + 1], row[g_count].
__global__ void scatter_add_kernel(const int32_t* order, const int32_t* start, const int32_t* row, int64_t g_count,
                                   const float* dout, int64_t ldd, float* dtable, int64_t ldt, int64_t h) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= h) return;
  for (int64_t g = blockIdx.y; g < g_count; g += gridDim.y) {
    float* dst = dtable + static_cast<int64_t>(row[g]) * ldt + j;
    float acc = *dst;
    for (int32_t k = start[g]; k < start[g + 1]; ++k) acc = __fadd_rn(acc, dout[static_cast<int64_t>(order[k]) * ldd + j]);
    *dst = acc;
  }
}

void check(const char* op, const TensorView& ids, const TensorView& table, const TensorView& out) {
  embedding_check(op, ids, table, out);
  OLMO2_CHECK(ids.device() == Device::CUDA && table.device() == Device::CUDA && out.device() == Device::CUDA, op,
              ": views not on the GPU");
}

// The ids on the host, after the work that wrote them.
std::vector<int32_t> host_ids(const TensorView& ids) {
  std::vector<int32_t> h(static_cast<size_t>(ids.size(0)));
  if (h.empty()) return h;
  OLMO2_CUDA_CHECK(cudaMemcpyAsync(h.data(), ids.data(), h.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                   compute_stream()));
  OLMO2_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  return h;
}

void check_ids(const std::vector<int32_t>& id, int64_t vocab) {
  check_token_ids(id.data(), static_cast<int64_t>(id.size()), vocab);
}

void gather(const TensorView& ids, const TensorView& table, int64_t first_id, const TensorView& out) {
  const int64_t n = ids.size(0), h = table.size(1);
  if (n == 0 || h == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n * h + kThreads - 1) / kThreads, 65535));
  const auto* id = static_cast<const int32_t*>(ids.data());
  auto* o = static_cast<float*>(out.data());
  if (table.dtype() == DType::F32)
    OLMO2_LAUNCH(blocks, kThreads, 0, compute_stream(), gather_kernel<float>)(id, n, static_cast<const float*>(table.data()),
                                                             table.stride(0), table.size(0), first_id, o,
                                                             out.stride(0), h);
  else
    OLMO2_LAUNCH(blocks, kThreads, 0, compute_stream(), gather_kernel<__nv_bfloat16>)(id, n, static_cast<const __nv_bfloat16*>(table.data()),
                                                             table.stride(0), table.size(0), first_id, o,
                                                             out.stride(0), h);
  OLMO2_CUDA_CHECK_LAUNCH("embedding");
}

void rows_backward(const char* op, const TensorView& ids, const TensorView& dout, int64_t first_id,
                   const TensorView& dtable, bool all_in_range) {
  embedding_backward_check(op, ids, dout, dtable);
  OLMO2_CHECK(ids.device() == Device::CUDA && dout.device() == Device::CUDA && dtable.device() == Device::CUDA, op,
              ": views not on the GPU");
  const int64_t rows = dtable.size(0), h = dtable.size(1);
  const std::vector<int32_t> id = host_ids(ids);
  if (all_in_range) check_ids(id, rows);
  // Token positions of the ids in the table, grouped by row, in increasing position.
  std::vector<int32_t> order;
  for (size_t i = 0; i < id.size(); ++i) {
    const int64_t r = static_cast<int64_t>(id[i]) - first_id;
    if (r >= 0 && r < rows) order.push_back(static_cast<int32_t>(i));
  }
  if (order.empty() || h == 0) return;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return id[a] < id[b]; });
  // One buffer: order | start (groups + 1) | row (groups).
  std::vector<int32_t> start, row;
  for (size_t k = 0; k < order.size(); ++k) {
    if (k == 0 || id[order[k]] != id[order[k - 1]]) {
      start.push_back(static_cast<int32_t>(k));
      row.push_back(static_cast<int32_t>(id[order[k]] - first_id));
    }
  }
  start.push_back(static_cast<int32_t>(order.size()));
  const int64_t groups = static_cast<int64_t>(row.size());
  std::vector<int32_t> packed(order);
  packed.insert(packed.end(), start.begin(), start.end());
  packed.insert(packed.end(), row.begin(), row.end());
  const detail::DeviceTemp dev(packed.size() * sizeof(int32_t));
  // Through ops::cuda::copy: `packed` is pageable and dies on return, and a
  // cudaMemcpyAsync from pageable memory may return before it has been read. copy()
  // stages it in pinned memory (or waits for the stream when it is large).
  const int64_t count = static_cast<int64_t>(packed.size());
  copy(TensorView(packed.data(), DType::I32, {count}, Device::CPU),
       TensorView(dev.get(), DType::I32, {count}, Device::CUDA));
  const int32_t* d_order = dev.as<int32_t>();
  const int32_t* d_start = d_order + order.size();
  const int32_t* d_row = d_start + groups + 1;
  const dim3 grid(static_cast<unsigned>((h + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(groups, 65535)));
  OLMO2_LAUNCH(grid, kThreads, 0, compute_stream(), scatter_add_kernel)(d_order, d_start, d_row, groups,
                                                              static_cast<const float*>(dout.data()), dout.stride(0),
                                                              static_cast<float*>(dtable.data()), dtable.stride(0), h);
  OLMO2_CUDA_CHECK_LAUNCH(op);
}

}  // namespace

void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) {
  check("embedding", ids, table, out);
  check_ids(host_ids(ids), table.size(0));
  gather(ids, table, 0, out);
}

void embedding_slice(const TensorView& ids, const TensorView& table, int64_t first_id, const TensorView& out) {
  check("embedding_slice", ids, table, out);
  gather(ids, table, first_id, out);
}

void embedding_backward(const TensorView& ids, const TensorView& dout, const TensorView& dtable) {
  rows_backward("embedding_backward", ids, dout, 0, dtable, true);
}

void embedding_slice_backward(const TensorView& ids, const TensorView& dout, int64_t first_id,
                              const TensorView& dtable) {
  rows_backward("embedding_slice_backward", ids, dout, first_id, dtable, false);
}

}  // namespace olmo2::ops::cuda
