// Tensor-parallel whole-projection QK-norm: the step as built (parallel::tp_qk_norm, one
// all-reduce of a [T, 2] fp32 buffer) against the all-gather-q-and-k variant vLLM and
// SGLang use, timed in the same run on the same slices, with a check that both give the
// same values. Per layer: time (best and median), ratio, bytes moved per rank. Not a test.
//
//   OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 mpirun -np 4 --oversubscribe
//       --allow-run-as-root build/bench/olmo2_qk_norm_bench
//       [--tokens 4096] [--hidden 2048] [--heads 16] [--kv-heads 16] [--iterations 20] [--warmup 2]
//
// Every rank of MPI_COMM_WORLD is one TP rank (Topology::make(world, world, 1, 1)).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "ops/rmsnorm.h"
#include "ops/tensor.h"
#include "parallel/communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/process_groups.h"
#include "parallel/topology.h"
#include "parallel/tp_qk_norm.h"

namespace {

using olmo2::Tensor;
using olmo2::TensorView;
using olmo2::parallel::Communicator;

struct Options {
  int64_t tokens = 4096;
  int64_t hidden = 2048;
  int64_t heads = 16;
  int64_t kv_heads = 16;
  int iterations = 20;
  int warmup = 2;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "olmo2_qk_norm_bench: %s\n"
               "usage: olmo2_qk_norm_bench [--tokens 4096] [--hidden 2048] [--heads 16] "
               "[--kv-heads 16] [--iterations 20] [--warmup 2]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg == "--help" || arg == "-h") {
      usage("help");
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage(arg + " needs a value");
    }
    int64_t v = 0;
    try {
      size_t used = 0;
      v = std::stoll(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
    } catch (const std::exception&) {
      usage(arg + ": not an integer: '" + value + "'");
    }
    if (v < (arg == "--warmup" ? 0 : 1)) usage(arg + " must be positive, got " + value);
    if (arg == "--tokens") o.tokens = v;
    else if (arg == "--hidden") o.hidden = v;
    else if (arg == "--heads") o.heads = v;
    else if (arg == "--kv-heads") o.kv_heads = v;
    else if (arg == "--iterations") o.iterations = static_cast<int>(v);
    else if (arg == "--warmup") o.warmup = static_cast<int>(v);
    else usage("unknown flag " + arg);
  }
  return o;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string mib(double bytes) {
  char buf[64];
  if (bytes >= 1024.0 * 1024.0) std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  else std::snprintf(buf, sizeof buf, "%.2f KiB", bytes / 1024.0);
  return buf;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (f >> a >> b >> c) return a + " " + b + " " + c;
  return "unknown";
}

// The all-gather variant (vLLM / SGLang Olmo2Attention._apply_qk_norm with tp > 1):
// gather q and k over TP, normalise whole rows with the whole weights, keep this rank's
// columns. Scratch buffers are allocated once by the caller, as a serving engine would.
struct GatherVariant {
  int64_t rows, q_local, k_local, q_width, k_width;
  int tp, rank;
  std::vector<float> gathered_q, gathered_k;  // rank-major [tp][T][local], as all_gather writes
  Tensor full_q, full_k;                      // [T, width]

  GatherVariant(int64_t t, int64_t ql, int64_t kl, int tp_size, int tp_rank)
      : rows(t), q_local(ql), k_local(kl), q_width(ql * tp_size), k_width(kl * tp_size),
        tp(tp_size), rank(tp_rank),
        gathered_q(static_cast<size_t>(t * ql * tp_size)),
        gathered_k(static_cast<size_t>(t * kl * tp_size)),
        full_q(Tensor::zeros({t, ql * tp_size})),
        full_k(Tensor::zeros({t, kl * tp_size})) {}

  void gather(const TensorView& q, const TensorView& k, Communicator& comm) {
    comm.all_gather({q.f32(), static_cast<size_t>(q.numel())}, gathered_q);
    comm.all_gather({k.f32(), static_cast<size_t>(k.numel())}, gathered_k);
  }

  // [rank][T][local] -> [T][rank·local + i]
  static void rearrange(const std::vector<float>& g, const Tensor& full, int64_t rows,
                        int64_t local, int tp) {
    float* out = full.f32();
    const int64_t width = local * tp;
    for (int r = 0; r < tp; ++r) {
      const float* src = g.data() + static_cast<int64_t>(r) * rows * local;
      for (int64_t t = 0; t < rows; ++t) {
        std::copy_n(src + t * local, local, out + t * width + r * local);
      }
    }
  }

  static void slice_back(const Tensor& full, const TensorView& x, int64_t local, int rank) {
    const float* in = full.f32();
    const int64_t width = full.shape()[1];
    for (int64_t t = 0; t < x.size(0); ++t) {
      std::copy_n(in + t * width + rank * local, local, x.f32() + t * x.stride(0));
    }
  }

  void run(const TensorView& q, const TensorView& w_q_full, const TensorView& k,
           const TensorView& w_k_full, float eps, Communicator& comm) {
    gather(q, k, comm);
    rearrange(gathered_q, full_q, rows, q_local, tp);
    rearrange(gathered_k, full_k, rows, k_local, tp);
    olmo2::ops::rmsnorm(full_q.view(), w_q_full, eps, full_q.view());
    olmo2::ops::rmsnorm(full_k.view(), w_k_full, eps, full_k.view());
    slice_back(full_q, q, q_local, rank);
    slice_back(full_k, k, k_local, rank);
  }
};

void fill_normal(std::vector<float>& v, uint32_t seed, int64_t cols) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Rows of different magnitudes (token t scaled by 0.25 … 8.25), so the norm matters.
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t t = static_cast<int64_t>(i) / cols;
    v[i] = normal(gen) * (0.25f + 0.5f * static_cast<float>(t % 17));
  }
}

void copy_into(const std::vector<float>& src, const Tensor& dst) {
  std::copy(src.begin(), src.end(), dst.f32());
}

}  // namespace

int main(int argc, char** argv) {
  namespace par = olmo2::parallel;
  const Options o = parse(argc, argv);
  par::MpiRuntime mpi;
  int status = 0;
  try {
    const int world = mpi.world_size();
    par::ProcessGroups groups = par::make_process_groups(par::Topology::make(world, world, 1, 1), 300.0);
    Communicator& tp = *groups.tp;
    const int tp_size = tp.size(), rank = tp.rank();
    const bool root = mpi.world_rank() == 0;

    if (o.hidden % o.heads != 0 || o.heads % tp_size != 0 || o.kv_heads % tp_size != 0 ||
        o.heads % o.kv_heads != 0) {
      if (root) {
        std::fprintf(stderr,
                     "olmo2_qk_norm_bench: need heads | hidden, kv-heads | heads and tp | kv-heads "
                     "(hidden %lld, heads %lld, kv-heads %lld, tp %d); a kv head replicated over "
                     "ranks (kv-heads < tp) is not benchmarked\n",
                     static_cast<long long>(o.hidden), static_cast<long long>(o.heads),
                     static_cast<long long>(o.kv_heads), tp_size);
      }
      return 2;
    }
    const int64_t T = o.tokens, hd = o.hidden / o.heads;
    const int64_t q_width = o.heads * hd, k_width = o.kv_heads * hd;
    const int64_t q_local = q_width / tp_size, k_local = k_width / tp_size;
    const float eps = 1e-6f;  // OLMo-2-0425-1B rms_norm_eps

    // Weights: the whole vectors on every rank (same seed), this rank's slice beside them.
    Tensor w_q_full = Tensor::zeros({q_width}), w_k_full = Tensor::zeros({k_width});
    {
      std::mt19937 gen(7);
      std::uniform_real_distribution<float> u(0.5f, 1.5f);
      for (int64_t i = 0; i < q_width; ++i) w_q_full.f32()[i] = u(gen);
      for (int64_t i = 0; i < k_width; ++i) w_k_full.f32()[i] = u(gen);
    }
    Tensor w_q = Tensor::zeros({q_local}), w_k = Tensor::zeros({k_local});
    std::copy_n(w_q_full.f32() + rank * q_local, q_local, w_q.f32());
    std::copy_n(w_k_full.f32() + rank * k_local, k_local, w_k.f32());

    // This rank's q [T, q_local] and k [T, k_local] (the column slices of the projections).
    std::vector<float> q0(static_cast<size_t>(T * q_local)), k0(static_cast<size_t>(T * k_local));
    fill_normal(q0, 1000u + static_cast<uint32_t>(rank), q_local);
    fill_normal(k0, 2000u + static_cast<uint32_t>(rank), k_local);

    Tensor qa = Tensor::zeros({T, q_local}), ka = Tensor::zeros({T, k_local});
    Tensor qb = Tensor::zeros({T, q_local}), kb = Tensor::zeros({T, k_local});
    GatherVariant gather(T, q_local, k_local, tp_size, rank);
    std::vector<float> stats(static_cast<size_t>(2 * T));

    // The four timed steps, interleaved in each iteration so that they see the same
    // machine state. Each starts from the pristine slices (copied in, untimed) after a
    // barrier; a step's time is the slowest rank's.
    struct Step {
      const char* name;
      std::function<void()> prepare, body;
      std::vector<double> times;
    };
    std::vector<Step> steps;
    steps.push_back({"(a) as built: tp_qk_norm",
                     [&] { copy_into(q0, qa); copy_into(k0, ka); },
                     [&] {
                       par::tp_qk_norm(qa.view(), w_q.view(), q_width, ka.view(), w_k.view(),
                                       k_width, /*k_counts=*/true, eps, tp);
                     },
                     {}});
    steps.push_back({"(b) all-gather q,k + full-row norm",
                     [&] { copy_into(q0, qb); copy_into(k0, kb); },
                     [&] { gather.run(qb.view(), w_q_full.view(), kb.view(), w_k_full.view(), eps, tp); },
                     {}});
    steps.push_back({"    (a) comm only: all_reduce [T,2]",
                     [&] { std::fill(stats.begin(), stats.end(), 1.0f); },
                     [&] { tp.all_reduce_sum(stats); },
                     {}});
    steps.push_back({"    (b) comm only: all_gather q, k",
                     [&] { copy_into(q0, qb); copy_into(k0, kb); },
                     [&] { gather.gather(qb.view(), kb.view(), tp); },
                     {}});

    for (int it = 0; it < o.warmup + o.iterations; ++it) {
      for (Step& s : steps) {
        s.prepare();
        tp.barrier();
        const double t0 = now_s();
        s.body();
        const double dt = now_s() - t0;
        if (it >= o.warmup) s.times.push_back(dt);
      }
    }
    for (Step& s : steps) {
      std::vector<float> t(s.times.begin(), s.times.end());
      tp.all_reduce_max(t);  // the step ends when its slowest rank does
      s.times.assign(t.begin(), t.end());
    }

    // Same values? (a) and (b) once more from the pristine slices, and both against an
    // fp64 reference of the whole rows (gathered untimed).
    copy_into(q0, qa); copy_into(k0, ka); copy_into(q0, qb); copy_into(k0, kb);
    par::tp_qk_norm(qa.view(), w_q.view(), q_width, ka.view(), w_k.view(), k_width, true, eps, tp);
    gather.run(qb.view(), w_q_full.view(), kb.view(), w_k_full.view(), eps, tp);
    Tensor q0t = Tensor::zeros({T, q_local}), k0t = Tensor::zeros({T, k_local});
    copy_into(q0, q0t); copy_into(k0, k0t);
    gather.gather(q0t.view(), k0t.view(), tp);  // gathered_q/k: the pristine whole rows
    // diffs: |a−b| q, |a−b| k, |a−ref|, |b−ref|, max |ref|
    std::vector<float> diffs(5, 0.0f);
    auto compare = [&](const Tensor& a, const Tensor& b, const std::vector<float>& g, int64_t local,
                       const Tensor& w_full, int64_t width, float& ab) {
      for (int64_t t = 0; t < T; ++t) {
        double ss = 0.0;
        for (int r = 0; r < tp_size; ++r) {
          const float* row = g.data() + static_cast<int64_t>(r) * T * local + t * local;
          for (int64_t i = 0; i < local; ++i) ss += static_cast<double>(row[i]) * row[i];
        }
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(width) + eps);
        const float* own = g.data() + static_cast<int64_t>(rank) * T * local + t * local;
        for (int64_t i = 0; i < local; ++i) {
          const double ref = static_cast<double>(w_full.f32()[rank * local + i]) * own[i] * inv;
          const float va = a.f32()[t * local + i], vb = b.f32()[t * local + i];
          ab = std::max(ab, std::abs(va - vb));
          diffs[2] = std::max(diffs[2], static_cast<float>(std::abs(va - ref)));
          diffs[3] = std::max(diffs[3], static_cast<float>(std::abs(vb - ref)));
          diffs[4] = std::max(diffs[4], static_cast<float>(std::abs(ref)));
        }
      }
    };
    compare(qa, qb, gather.gathered_q, q_local, w_q_full, q_width, diffs[0]);
    compare(ka, kb, gather.gathered_k, k_local, w_k_full, k_width, diffs[1]);
    tp.all_reduce_max(diffs);

    if (root) {
      const unsigned cores = std::thread::hardware_concurrency();
      const char* omp = std::getenv("OMP_NUM_THREADS");
      std::printf("QK-norm over TP, per layer: as built (one all-reduce of [T,2] fp32) vs all-gather q,k\n");
      std::printf("tp %d (world %d), tokens %lld, hidden %lld, heads %lld, kv-heads %lld, head_dim %lld\n",
                  tp_size, world, static_cast<long long>(T), static_cast<long long>(o.hidden),
                  static_cast<long long>(o.heads), static_cast<long long>(o.kv_heads),
                  static_cast<long long>(hd));
      std::printf("q width %lld (local %lld), k width %lld (local %lld), fp32, eps %g\n",
                  static_cast<long long>(q_width), static_cast<long long>(q_local),
                  static_cast<long long>(k_width), static_cast<long long>(k_local), static_cast<double>(eps));
      std::printf("iterations %d (+%d warm-up), barrier before each; time = slowest rank's\n",
                  o.iterations, o.warmup);
      std::printf("machine: %u hardware threads, %d ranks%s, OMP_NUM_THREADS=%s, load average %s\n\n",
                  cores, world, static_cast<unsigned>(world) > cores ? " (OVERSUBSCRIBED)" : "",
                  omp ? omp : "unset", load_average().c_str());

      std::printf("%-38s %12s %12s %10s %10s\n", "step", "best ms", "median ms", "best/(a)", "med/(a)");
      const double a_best = *std::min_element(steps[0].times.begin(), steps[0].times.end());
      const double a_med = median(steps[0].times);
      for (const Step& s : steps) {
        const double best = *std::min_element(s.times.begin(), s.times.end());
        const double med = median(s.times);
        std::printf("%-38s %12.3f %12.3f %9.1fx %9.1fx\n", s.name, best * 1e3, med * 1e3,
                    best / a_best, med / a_med);
      }

      const double n = tp_size;
      const double ar_payload = static_cast<double>(T) * 2 * 4;
      const double ar_per_rank = 2.0 * (n - 1) / n * ar_payload;
      const double ag_in = static_cast<double>(T) * static_cast<double>(q_local + k_local) * 4;
      const double ag_out = static_cast<double>(T) * static_cast<double>(q_width + k_width) * 4;
      const double ag_per_rank = (n - 1) / n * ag_out;
      std::printf("\nbytes per layer (fp32):\n");
      std::printf("  (a) all-reduce payload   T*2*4                       = %s (%.0f B)\n",
                  mib(ar_payload).c_str(), ar_payload);
      std::printf("      per rank, bandwidth-optimal all-reduce (ring):\n");
      std::printf("      sent = received      2*(tp-1)/tp * T*2*4          = %s (%.0f B)\n",
                  mib(ar_per_rank).c_str(), ar_per_rank);
      std::printf("  (b) all-gather payload   in  T*(q_local+k_local)*4     = %s per rank\n",
                  mib(ag_in).c_str());
      std::printf("                           out T*(q_width+k_width)*4     = %s per rank\n",
                  mib(ag_out).c_str());
      std::printf("      received per rank    (tp-1)/tp * T*(q_width+k_width)*4 = %s (%.0f B)\n",
                  mib(ag_per_rank).c_str(), ag_per_rank);
      std::printf("  received per rank (b)/(a): %.0fx;  payload (b out)/(a): %.0fx\n",
                  ag_per_rank / ar_per_rank, ag_out / ar_payload);

      std::printf("\nsame values (max over ranks and elements):\n");
      std::printf("  max |(a)-(b)|  q %.3g   k %.3g\n", static_cast<double>(diffs[0]),
                  static_cast<double>(diffs[1]));
      std::printf("  max |(a)-fp64| %.3g   max |(b)-fp64| %.3g   (max |value| %.3g)\n",
                  static_cast<double>(diffs[2]), static_cast<double>(diffs[3]), static_cast<double>(diffs[4]));
      const bool same = std::max(diffs[0], diffs[1]) <= 1e-4f * std::max(1.0f, diffs[4]);
      std::printf("  %s\n", same ? "OK: (a) and (b) agree" : "MISMATCH: (a) and (b) differ");
      if (!same) status = 1;
      std::fflush(stdout);
    }
    tp.broadcast(std::span<std::byte>(reinterpret_cast<std::byte*>(&status), sizeof status), 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "olmo2_qk_norm_bench (rank %d): %s\n", mpi.world_rank(), e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);  // do not leave the peers waiting in a collective
    return 1;
  }
  return status;
}
