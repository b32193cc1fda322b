// Ring attention's forward + backward over the ranks of MPI_COMM_WORLD (the CP group: one
// sequence split in zigzag order) against ops::causal_attention + causal_attention_backward
// on the whole sequence in one process (rank 0, the others waiting), timed in the same
// run, with the largest difference of the outputs and gradients. Not a test.
//
//   OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe
//       --allow-run-as-root build/bench/olmo2_ring_attention_bench
//       [--seq 4096] [--heads 16] [--kv-heads 16] [--head-dim 64] [--window 0] [--iterations 3]
//       [--reference 1] [--bf16 0]
//
// docs/architecture.md §7 "Context parallelism: ring attention"; bench/README.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "ops/attention.h"
#include "ops/backward.h"
#include "parallel/mpi_runtime.h"
#include "parallel/process_groups.h"
#include "runtime/model/ring_attention.h"

namespace {

using olmo2::DType;
using olmo2::Tensor;

struct Options {
  int64_t seq = 4096, heads = 16, kv_heads = 16, head_dim = 64, window = 0;
  int iterations = 3;
  bool reference = true;
  DType act = DType::F32;  ///< --bf16 1: activations rounded as in bf16 training  ///< --reference 0: the ring alone (memory runs at long sequences)
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (a == "--seq") o.seq = v;
    else if (a == "--heads") o.heads = v;
    else if (a == "--kv-heads") o.kv_heads = v;
    else if (a == "--head-dim") o.head_dim = v;
    else if (a == "--window") o.window = v;
    else if (a == "--iterations") o.iterations = static_cast<int>(v);
    else if (a == "--reference") o.reference = v != 0;
    else if (a == "--bf16") o.act = v != 0 ? DType::BF16 : DType::F32;
    else {
      std::fprintf(stderr, "olmo2_ring_attention_bench: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Tensor random_tensor(int64_t rows, int64_t cols, std::mt19937& rng) {
  Tensor t = Tensor::zeros({rows, cols});
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
  return t;
}

/// This rank's rows of a whole-sequence tensor.
Tensor rows_of(const olmo2::ContextShard& s, int rank, const Tensor& whole) {
  const int64_t w = whole.shape()[1];
  Tensor t = Tensor::zeros({s.rows(rank), w});
  for (int64_t r = 0; r < s.rows(rank); ++r) std::copy_n(whole.f32() + s.pos[rank][r] * w, w, t.f32() + r * w);
  return t;
}

double max_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(double(a.f32()[i]) - b.f32()[i]));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  olmo2::parallel::MpiRuntime mpi;
  const Options o = parse(argc, argv);
  auto cp = olmo2::parallel::make_world_communicator(600.0);
  const int j = cp->rank(), n = cp->size();
  const int h = static_cast<int>(o.heads), kv = static_cast<int>(o.kv_heads);
  std::mt19937 rng(7);
  const olmo2::ContextShard s = olmo2::zigzag_shard({o.seq}, n);
  // The whole sequence's tensors only for the reference: a memory run holds this rank's rows.
  const int64_t rows = o.reference ? o.seq : s.rows(j);
  const Tensor q = random_tensor(rows, o.heads * o.head_dim, rng), k = random_tensor(rows, o.kv_heads * o.head_dim, rng),
               v = random_tensor(rows, o.kv_heads * o.head_dim, rng), dout = random_tensor(rows, o.heads * o.head_dim, rng);
  auto local = [&](const Tensor& t) { return o.reference ? rows_of(s, j, t) : Tensor(); };
  const Tensor lq_ = local(q), lk_ = local(k), lv_ = local(v), ldo_ = local(dout);
  const Tensor& lq = o.reference ? lq_ : q;
  const Tensor& lk = o.reference ? lk_ : k;
  const Tensor& lv = o.reference ? lv_ : v;
  const Tensor& ldo = o.reference ? ldo_ : dout;
  Tensor out = Tensor::zeros(lq.shape()), lse = Tensor::zeros({lq.shape()[0], o.heads}), dq = Tensor::zeros(lq.shape()),
         dk = Tensor::zeros(lk.shape()), dv = Tensor::zeros(lk.shape());
  double best_fwd = 1e30, best_all = 1e30;
  for (int it = 0; it < o.iterations; ++it) {
    cp->barrier();
    const double t0 = now();
    olmo2::ring_attention_forward(*cp, s, lq.view(), lk.view(), lv.view(), h, kv, o.window, o.act, out.view(),
                                  lse.view());
    double t1 = now() - t0;
    olmo2::ring_attention_backward(*cp, s, lq.view(), lk.view(), lv.view(), out.view(), lse.view(), ldo.view(), h, kv,
                                   o.window, dq.view(), dk.view(), dv.view(), o.act);
    double t2 = now() - t0;
    cp->all_reduce_max(std::span<double>(&t1, 1));  // a step waits for the slowest rank
    cp->all_reduce_max(std::span<double>(&t2, 1));
    best_fwd = std::min(best_fwd, t1), best_all = std::min(best_all, t2);
  }
  // The reference on the whole sequence, rank 0 alone (the others wait in the barrier).
  double ref_fwd = 0, ref_all = 0, diff[4] = {0, 0, 0, 0};
  double peak_gb = 0;  // this rank's peak resident set before the reference runs
  {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    peak_gb = double(u.ru_maxrss) / (1 << 20);  // KiB to GiB
    cp->all_reduce_max(std::span<double>(&peak_gb, 1));
  }
  if (j == 0 && o.reference) {
    Tensor ro = Tensor::zeros(q.shape()), rdq = Tensor::zeros(q.shape()), rdk = Tensor::zeros(k.shape()),
           rdv = Tensor::zeros(k.shape());
    ref_fwd = ref_all = 1e30;
    for (int it = 0; it < o.iterations; ++it) {
      const double t0 = now();
      olmo2::ops::causal_attention(q.view(), k.view(), v.view(), h, kv, ro.view(), o.act, o.window);
      const double t1 = now() - t0;
      olmo2::ops::causal_attention_backward(q.view(), k.view(), v.view(), dout.view(), h, kv, rdq.view(), rdk.view(),
                                            rdv.view(), o.window);
      ref_fwd = std::min(ref_fwd, t1), ref_all = std::min(ref_all, now() - t0);
    }
    diff[0] = max_diff(out, rows_of(s, 0, ro)), diff[1] = max_diff(dq, rows_of(s, 0, rdq));
    diff[2] = max_diff(dk, rows_of(s, 0, rdk)), diff[3] = max_diff(dv, rows_of(s, 0, rdv));
  }
  cp->barrier();
  if (j == 0) {
    std::printf("seq %lld heads %lld/%lld head_dim %lld window %lld, %s, cp %d, best of %d\n", (long long)o.seq,
                (long long)o.heads, (long long)o.kv_heads, (long long)o.head_dim, (long long)o.window,
                o.act == DType::BF16 ? "bf16" : "f32", n, o.iterations);
    std::printf("ring attention (slowest rank): forward %.3f s  forward+backward %.3f s\n", best_fwd, best_all);
    std::printf("peak resident set of the largest rank (inputs, outputs, ring buffers): %.2f GiB\n", peak_gb);
    if (!o.reference) return 0;
    std::printf("causal_attention, one process: forward %.3f s  forward+backward %.3f s\n", ref_fwd, ref_all);
    std::printf("max |ring - reference| on rank 0's rows: out %.2e dq %.2e dk %.2e dv %.2e\n", diff[0], diff[1],
                diff[2], diff[3]);
  }
  return 0;
}
