// CUDA paged attention for serving (docs/architecture.md §2, §8): the tile kernel of
// attention_tile.cuh with keys and values read through each sequence's block table.
//
// Per call the host validates every sequence as ops::cpu::paged_attention does, cuts
// each sequence's new rows into tiles of up to 4 (decode-only batches) or 16 rows, and
// packs the tile descriptors and the used part of every block table. Their device copy
// is kept by content (ops/upload_cache.h): every layer of a step packs the same bytes,
// so the first layer uploads them, in one transfer from a pinned staging buffer, and
// the others reuse the copy without a transfer or a wait. A row's result depends only on its query,
// its positions (0 … start+t, or its window's) and the fixed key order (tiles of 32
// positions aligned to multiples of 32), not
// on the rows sharing its block or the tile size (attention_tile.cuh), so it is
// batch-invariant, chunking-invariant, and the same bits as cuda::causal_attention.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "ops/cuda/attention_tile.cuh"
#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/runtime.h"
#include "ops/paged_attention.h"
#include "ops/upload_cache.h"

namespace olmo2::ops {
namespace {

using cuda::attention_detail::kRowsPerWarp;
using cuda::attention_detail::TileDesc;

// A pinned host buffer the descriptors are staged in, reused across calls. `done` is
// recorded after the copy out of it; the next call waits for it before writing.
struct Staging {
  std::mutex mutex;
  void* host = nullptr;
  size_t capacity = 0;
  cudaEvent_t done = nullptr;
};

Staging& staging() {
  static Staging* s = new Staging;  // never destroyed: it may outlive the CUDA context
  return *s;
}

// Copies `bytes` at `src` to `dst` (device) on the compute stream through the staging
// buffer; `src` may be freed when this returns.
void upload(void* dst, const void* src, size_t bytes) {
  Staging& s = staging();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.done == nullptr) OLMO2_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  OLMO2_CUDA_CHECK(cudaEventSynchronize(s.done));  // the previous copy has read the buffer
  if (bytes > s.capacity) {
    if (s.host != nullptr) OLMO2_CUDA_CHECK(cudaFreeHost(s.host));
    s.host = nullptr, s.capacity = 0;
    const size_t cap = std::max<size_t>(bytes, 64 * 1024);
    OLMO2_CUDA_CHECK(cudaMallocHost(&s.host, cap));
    s.capacity = cap;
  }
  std::memcpy(s.host, src, bytes);
  OLMO2_CUDA_CHECK(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, cuda::compute_stream()));
  OLMO2_CUDA_CHECK(cudaEventRecord(s.done, cuda::compute_stream()));
}

// The device copies of recent descriptor packs (a step's, and a few before it).
UploadCache& descriptors() {
  static UploadCache* c = new UploadCache(  // never destroyed: it may outlive the CUDA context
      [](const void* src, size_t bytes) -> void* {
        void* dev = cuda::device_malloc(bytes);
        try {
          upload(dev, src, bytes);
        } catch (...) {
          cuda::device_free(dev);
          throw;
        }
        return dev;
      },
      [](void* dev) { cuda::device_free(dev); }, 4);
  return *c;
}

}  // namespace

void cuda::paged_attention(const TensorView& q, const TensorView& k_pool, const TensorView& v_pool,
                           int64_t block_size, const std::vector<PagedSequence>& sequences, int n_heads,
                           int n_kv_heads, const TensorView& out, DType act, int64_t window) {
  // The checks of ops::cpu::paged_attention, in its order, plus CUDA views (f32; the pools
  // f32 or bf16).
  OLMO2_CHECK(q.dim() == 2 && k_pool.dim() == 2 && v_pool.dim() == 2 && out.dim() == 2,
              "paged attention wants 2-d views, got q ", q.shape_str(), " k_pool ", k_pool.shape_str(), " v_pool ",
              v_pool.shape_str(), " out ", out.shape_str());
  OLMO2_CHECK(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0, "paged attention: heads ", n_heads,
              " kv heads ", n_kv_heads);
  const int64_t hd = q.size(1) / n_heads;
  OLMO2_CHECK(hd > 0 && q.size(1) == hd * n_heads && out.shape() == q.shape() && k_pool.size(1) == hd * n_kv_heads &&
                  v_pool.shape() == k_pool.shape(),
              "paged attention: q ", q.shape_str(), " k_pool ", k_pool.shape_str(), " v_pool ", v_pool.shape_str(),
              " out ", out.shape_str(), " heads ", n_heads, "/", n_kv_heads);
  for (const TensorView* t : {&q, &k_pool, &v_pool, &out}) {
    const bool pool = t == &k_pool || t == &v_pool;
    OLMO2_CHECK((t->dtype() == DType::F32 || (pool && t->dtype() == DType::BF16)) && t->device() == Device::CUDA &&
                    t->stride(1) == 1,
                "paged attention wants f32 CUDA views (bf16 pools too) with contiguous rows, got ",
                dtype_name(t->dtype()), " ", t->shape_str());
  }
  OLMO2_CHECK(v_pool.dtype() == k_pool.dtype(), "paged attention: pools ", dtype_name(k_pool.dtype()), "/",
              dtype_name(v_pool.dtype()), " (f32 or bf16, both the same)");
  OLMO2_CHECK(block_size > 0 && k_pool.size(0) % block_size == 0, "paged attention: pool rows ", k_pool.size(0),
              " not a multiple of block size ", block_size);
  OLMO2_CHECK(act == DType::F32 || act == DType::BF16, "paged attention: act ", dtype_name(act));
  OLMO2_CHECK(window >= 0, "paged attention: window ", window, " is negative (0 means no window)");
  attention_detail::dims_per_lane(hd, "paged attention");
  const int64_t num_blocks = k_pool.size(0) / block_size;
  const int64_t t_total = q.size(0);

  bool decode_only = true;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const PagedSequence& seq = sequences[s];
    OLMO2_CHECK(seq.rows >= 1 && seq.start >= 0 && seq.row_begin >= 0 && seq.row_begin + seq.rows <= t_total,
                "paged attention: sequence ", s, " rows [", seq.row_begin, ", ", seq.row_begin + seq.rows, ") start ",
                seq.start, " outside q with ", t_total, " rows");
    const int64_t ctx = seq.start + seq.rows;
    const int64_t blocks = (ctx + block_size - 1) / block_size;
    OLMO2_CHECK(static_cast<int64_t>(seq.block_table.size()) >= blocks, "paged attention: sequence ", s, " needs ",
                blocks, " blocks for ", ctx, " positions (block size ", block_size, "), block table has ",
                seq.block_table.size());
    // Blocks wholly before the first row's window are never read (entries may be −1,
    // docs/architecture.md §8): not checked, and the kernel loads no key before it.
    const int64_t first_read = window > 0 ? std::max<int64_t>(0, seq.start + 1 - window) / block_size : 0;
    for (int64_t b = first_read; b < blocks; ++b) {
      const int64_t id = seq.block_table[static_cast<size_t>(b)];
      if (id < 0 || id >= num_blocks) {
        OLMO2_THROW(InputError, "paged attention: sequence ", s, " block table entry ", b, " is block ", id,
                    ", outside the pool of ", num_blocks, " blocks");
      }
    }
    decode_only = decode_only && seq.rows <= kRowsPerWarp;
  }
  if (sequences.empty()) return;

  // One warp per block for decode-only batches (rows ≤ 4), four otherwise; the per-row
  // arithmetic is the same either way (attention_tile.cuh).
  const int warps = decode_only ? 1 : 4;
  const int64_t tile_rows = static_cast<int64_t>(kRowsPerWarp) * warps;
  std::vector<TileDesc> tiles;
  std::vector<int32_t> tables;
  for (const PagedSequence& seq : sequences) {
    const int64_t blocks = (seq.start + seq.rows + block_size - 1) / block_size;
    OLMO2_CHECK(static_cast<int64_t>(tables.size()) + blocks <= std::numeric_limits<int32_t>::max(),
                "paged attention: block tables too long");
    const int32_t offset = static_cast<int32_t>(tables.size());
    tables.insert(tables.end(), seq.block_table.begin(), seq.block_table.begin() + blocks);
    for (int64_t r0 = 0; r0 < seq.rows; r0 += tile_rows) {
      tiles.push_back({seq.row_begin + r0, seq.start + r0, static_cast<int32_t>(std::min(tile_rows, seq.rows - r0)),
                       offset});
    }
  }

  // One transfer: the descriptors, then the tables (8-byte aligned after the descriptors).
  const size_t tiles_bytes = tiles.size() * sizeof(TileDesc);
  const size_t bytes = tiles_bytes + tables.size() * sizeof(int32_t);
  std::vector<unsigned char> packed(bytes);
  std::memcpy(packed.data(), tiles.data(), tiles_bytes);
  std::memcpy(packed.data() + tiles_bytes, tables.data(), tables.size() * sizeof(int32_t));
  const auto* dev = static_cast<const unsigned char*>(descriptors().get(packed.data(), bytes));
  {
    attention_detail::TileArgs a{};
    a.q = static_cast<const float*>(q.data()), a.q_ld = q.stride(0);
    a.k_ld = k_pool.stride(0), a.v_ld = v_pool.stride(0);
    if (k_pool.dtype() == DType::BF16) {
      a.k16 = static_cast<const unsigned short*>(k_pool.data());
      a.v16 = static_cast<const unsigned short*>(v_pool.data());
    } else {
      a.k = static_cast<const float*>(k_pool.data());
      a.v = static_cast<const float*>(v_pool.data());
    }
    a.out = static_cast<float*>(out.data()), a.o_ld = out.stride(0);
    a.hd = static_cast<int>(hd), a.group = n_heads / n_kv_heads;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.tiles = reinterpret_cast<const TileDesc*>(dev);
    a.tables = reinterpret_cast<const int32_t*>(dev + tiles_bytes);
    a.block_size = block_size;
    a.window = window;
    attention_detail::launch_tiles(act == DType::BF16 ? attention_detail::Mode::kTwoPass : attention_detail::Mode::kOnline,
                                   warps, a, static_cast<int64_t>(tiles.size()), n_heads);
  }
}

}  // namespace olmo2::ops
