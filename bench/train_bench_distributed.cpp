// olmo2_train_bench, distributed mode (bench/README.md, "Training step under mpirun"): any
// of --tp/--pp/--dp given; run under mpirun, world = tp·pp·dp.
//
//   mpirun -np 8 olmo2_train_bench --tp 2 --pp 2 --dp 2 [--sizes demo] [--steps 3] [--warmup 1]
//          [--seq-len 128] [--batch 8] [--micro-batch M] [--zero-stage 0|1|2|3] [--pp-virtual V] [--threads N] [--tmp-dir DIR]
//
// Times Trainer::step on every rank (data loader, 1F1B pipeline, TP collectives, DP
// gradient all-reduce, clip, AdamW; lr 3e-4 constant) over one size, on uniform random
// tokens that rank 0 writes to a temporary .npy file. Every communicator of the
// ProcessGroups is wrapped in a TimedCommunicator; after --warmup steps the timers are
// reset and --steps steps are timed. Rank 0 reports tokens/s (global batch / the slowest
// rank's step time), MFU against the machine's sgemm peak (one process with all hardware
// threads, measured by rank 0 while the other ranks wait in a barrier, before and after
// the steps; the higher counts) and the communication fraction (seconds inside
// communicator calls, waiting for peers included, / step time; max and mean over ranks).
// Threads per rank: --threads, else OMP_NUM_THREADS, else hardware threads / ranks on
// the node (at least 1). --tp 1 --pp 1 --dp 1 runs the Trainer on one process.
#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/threads.h"
#include "parallel/agreement.h"
#include "parallel/mpi_runtime.h"
#include "parallel/process_groups.h"
#include "parallel/timed_communicator.h"
#include "runtime/model/config.h"
#include "runtime/io/npy.h"
#include "runtime/train/trainer.h"
#include "train_bench_common.h"

namespace olmo2::bench {

namespace par = olmo2::parallel;

namespace {

/// CPUs this process may run on (sched_getaffinity); mpirun may bind ranks to cores.
int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
}

/// The machine's sgemm peak (header): rank 0 runs sgemm_gflops with `machine_threads`
/// while every other rank waits in a world barrier; 0 on the other ranks.
double machine_sgemm_peak(par::Communicator& world, int machine_threads, int rank_threads,
                          const Options& o) {
  world.barrier();
  double g = 0;
  if (world.rank() == 0) {
    olmo2::set_num_threads(machine_threads);
    g = sgemm_gflops(o.sgemm_size, o.sgemm_reps);
    olmo2::set_num_threads(rank_threads);
  }
  world.barrier();
  return g;
}

/// Per-rank figures gathered on rank 0, as floats (seconds, MB).
enum Field {
  kElapsed,
  kComm,
  kWorld,
  kTp,
  kPp,
  kDp,
  kMBytes,
  kCalls,
  kOp0,
  kFields = kOp0 + par::kCommOpCount
};

}  // namespace

int run_distributed(const Options& o) {
  par::MpiRuntime mpi;
  const int rank = mpi.world_rank(), world_size = mpi.world_size();
  par::Topology topo;
  try {
    topo = par::Topology::make(world_size, o.tp, o.pp, o.dp);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "olmo2_train_bench: %s\n", e.what());
    mpi.barrier();
    return 2;
  }
  std::string dir;
  int status = 0;
  try {
    par::ProcessGroups groups = par::make_process_groups(topo, /*timeout_s=*/600);
    // Every group through a TimedCommunicator: the Trainer sees only the wrappers.
    std::vector<par::TimedCommunicator*> timers;  // world, tp, pp, dp
    for (std::unique_ptr<par::Communicator>* c :
         {&groups.world, &groups.tp, &groups.pp, &groups.dp}) {
      auto t = std::make_unique<par::TimedCommunicator>(std::move(*c));
      timers.push_back(t.get());
      *c = std::move(t);
    }
    par::Communicator& world = *groups.world;
    const par::Layout l = topo.layout();
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    int threads = o.threads;
    if (!threads) {
      const char* env = std::getenv("OMP_NUM_THREADS");
      threads = env && std::atoi(env) > 0 ? std::atoi(env) : std::max(1, hw / groups.local_size);
    }
    olmo2::set_num_threads(threads);
    const ModelConfig config = size_config(o.sizes[0], o);
    int64_t micro = o.micro_batch;
    if (!micro && o.batch % l.dp == 0) {  // default: ≥ 2·pp micro-batches per DP rank when pp > 1
      micro = o.batch / l.dp;
      while (l.pp > 1 && micro % 2 == 0 && o.batch / l.dp / micro < 2 * l.pp) micro /= 2;
    }

    // Rank 0 writes the model config and (warmup + steps) global batches of random tokens.
    const int64_t total_steps = o.warmup + o.steps;
    par::agree(&world, [&] {
      if (rank != 0) return;
      std::string tmpl = ((o.tmp_dir.empty() ? std::filesystem::temp_directory_path()
                                             : std::filesystem::path(o.tmp_dir)) /
                          "olmo2_train_bench.XXXXXX")
                             .string();
      if (!mkdtemp(tmpl.data()))
        throw std::runtime_error("cannot create a directory " + tmpl + ": " + std::strerror(errno));
      dir = tmpl;
      std::ofstream(dir + "/config.json") << config.to_json().dump(2) << "\n";
      std::mt19937 rng(42);
      std::uniform_int_distribution<uint32_t> id(0, static_cast<uint32_t>(config.vocab_size - 1));
      std::vector<uint32_t> tokens(static_cast<size_t>(total_steps * o.batch * o.seq_len));
      std::generate(tokens.begin(), tokens.end(), [&] { return id(rng); });
      olmo2::NpyWriter w(dir + "/tokens.npy");
      w.append(tokens);
      w.close();
    });
    par::broadcast_string(world, dir, 0);

    olmo2::TrainOptions to;
    to.model_config = dir + "/config.json";
    to.data = {dir + "/tokens.npy"};
    to.seq_len = o.seq_len;
    to.global_batch = o.batch;
    to.micro_batch = micro;
    to.steps = total_steps;
    to.lr = 3e-4;
    to.schedule = "constant";
    to.seed = 1234;
    to.zero_stage = o.zero_stage;
    to.pp_virtual = o.pp_virtual;
    to.precision = o.precision;

    if (rank == 0) {
      std::printf(
          "olmo2_train_bench: Trainer::step on %d ranks (tp %d, pp %d, dp %d%s), %d threads "
          "per rank (%d ranks on this node x %d = %d on %d hardware threads; rank 0 may use %d "
          "CPUs), OpenBLAS core %s, precision %s, load average %s\n",
          world_size, l.tp, l.pp, l.dp, o.zero_stage ? (", ZeRO-" + std::to_string(o.zero_stage)).c_str() : "", threads, groups.local_size,
          threads, groups.local_size * threads, hw, affinity_cpus(), openblas_get_corename(),
          o.precision.c_str(), load_average().c_str());
      std::fflush(stdout);
    }
    if (rank == 0 && affinity_cpus() < hw) {
      std::printf(
          "  warning: rank 0 may run on %d of the %d hardware threads (mpirun binds ranks to "
          "cores when np <= cores): the sgemm peak below is of those only; start mpirun with "
          "--bind-to none\n",
          affinity_cpus(), hw);
    }
    const double peak_start = machine_sgemm_peak(world, hw, threads, o);
    olmo2::Trainer trainer(to, &groups);
    const double flops = train_step_flops(config, o.batch, o.seq_len);
    const double tokens = static_cast<double>(o.batch * o.seq_len);
    if (rank == 0) {
      std::printf(
          "  %s: %lld parameters; seq_len %lld, global batch %lld sequences, micro-batch %lld "
          "(%lld per DP rank), %lld warm-up + %lld timed steps\n",
          o.sizes[0].c_str(), static_cast<long long>(config.parameter_count()),
          static_cast<long long>(o.seq_len), static_cast<long long>(o.batch),
          static_cast<long long>(trainer.micro_batch()),
          static_cast<long long>(o.batch / l.dp / trainer.micro_batch()),
          static_cast<long long>(o.warmup), static_cast<long long>(o.steps));
      std::printf(
          "  step = Trainer::step (data loader, 1F1B, TP/DP collectives, grad norm, clip 1.0, "
          "AdamW lr 3e-4)\n");
      std::fflush(stdout);
    }
    double last_loss = 0;
    auto one_step = [&](int64_t s) {
      const olmo2::StepRecord r = trainer.step();
      last_loss = r.loss;
      if (rank == 0) {
        std::fprintf(stderr, "[%s] %s %lld: %.3f s loss %.6f grad norm %.6f\n", o.sizes[0].c_str(),
                     s <= o.warmup ? "warm-up" : "step", static_cast<long long>(s), r.seconds,
                     r.loss, r.grad_norm);
      }
    };
    for (int64_t s = 1; s <= o.warmup; ++s) one_step(s);
    world.barrier();
    for (par::TimedCommunicator* t : timers) t->reset();
    const auto t0 = Clock::now();
    for (int64_t s = o.warmup + 1; s <= total_steps; ++s) one_step(s);
    // This rank's figures, gathered on every rank.
    std::vector<float> mine(kFields, 0.0f);
    mine[kElapsed] = static_cast<float>(seconds_since(t0));
    for (size_t g = 0; g < timers.size(); ++g) {
      mine[kWorld + g] = static_cast<float>(timers[g]->total_seconds());
      mine[kComm] += mine[kWorld + g];
      mine[kMBytes] += static_cast<float>(static_cast<double>(timers[g]->total_bytes()) / 1e6);
      mine[kCalls] += static_cast<float>(timers[g]->total_calls());
      for (int op = 0; op < par::kCommOpCount; ++op) {
        mine[kOp0 + op] +=
            static_cast<float>(timers[g]->stats(static_cast<par::CommOp>(op)).seconds);
      }
    }
    std::vector<float> all(static_cast<size_t>(kFields) * world_size);
    timers[0]->inner().all_gather(mine, all);
    const double peak_end = machine_sgemm_peak(world, hw, threads, o);
    if (rank == 0) {
      const double peak = std::max(peak_start, peak_end);
      auto at = [&](int r, int f) {
        return static_cast<double>(all[static_cast<size_t>(r) * kFields + f]);
      };
      double step_s = 0, frac_max = 0, frac_mean = 0, group_mean[4] = {},
             op_mean[par::kCommOpCount] = {};
      for (int r = 0; r < world_size; ++r) {
        step_s = std::max(step_s, at(r, kElapsed) / static_cast<double>(o.steps));
        const double frac = at(r, kComm) / at(r, kElapsed);
        frac_max = std::max(frac_max, frac);
        frac_mean += frac / world_size;
        for (int g = 0; g < 4; ++g)
          group_mean[g] += at(r, kWorld + g) / at(r, kElapsed) / world_size;
        for (int op = 0; op < par::kCommOpCount; ++op)
          op_mean[op] += at(r, kOp0 + op) / at(r, kElapsed) / world_size;
      }
      std::printf(
          "  sgemm %lld^3 (best of %lld), one process with all %d hardware threads, the other "
          "ranks waiting: %.1f GFLOP/s before, %.1f after; peak = %.1f; load average now %s\n",
          static_cast<long long>(o.sgemm_size), static_cast<long long>(o.sgemm_reps), hw,
          peak_start, peak_end, peak, load_average().c_str());
      std::printf(
          "  communication = seconds inside communicator calls (waiting for peers included) / "
          "step time\n\n");
      std::printf("%-5s %-14s %9s %9s %7s %7s %7s %7s %7s %9s %7s\n", "rank", "(tp,dp,pp)",
                  "step s", "comm s", "comm", "world", "tp", "pp", "dp", "MB/step", "calls");
      for (int r = 0; r < world_size; ++r) {
        const par::Coords c = topo.coords(r);
        const std::string coords = "(" + std::to_string(c.tp) + "," + std::to_string(c.dp) + "," +
                                   std::to_string(c.pp) + ")";
        const double e = at(r, kElapsed);
        std::printf("%-5d %-14s %9.3f %9.3f %6.1f%% %6.1f%% %6.1f%% %6.1f%% %6.1f%% %9.2f %7.0f\n",
                    r, coords.c_str(), e / o.steps, at(r, kComm) / o.steps, 100 * at(r, kComm) / e,
                    100 * at(r, kWorld) / e, 100 * at(r, kTp) / e, 100 * at(r, kPp) / e,
                    100 * at(r, kDp) / e, at(r, kMBytes) / o.steps, at(r, kCalls) / o.steps);
      }
      const double gflops = flops / step_s * 1e-9;
      std::printf(
          "\nlayout tp %d pp %d dp %d: step %.3f s (slowest rank), %.1f tokens/s, %.2f model "
          "GFLOP/s, MFU %.1f%%, communication %.1f%% max / %.1f%% mean over ranks\n",
          l.tp, l.pp, l.dp, step_s, tokens / step_s, gflops, 100 * gflops / peak, 100 * frac_max,
          100 * frac_mean);
      std::printf("  by operation (mean over ranks, share of step time):");
      for (int op = 0; op < par::kCommOpCount; ++op) {
        if (op_mean[op] > 0)
          std::printf(" %s %.1f%%", par::to_string(static_cast<par::CommOp>(op)),
                      100 * op_mean[op]);
      }
      std::printf("\n\n");
      nlohmann::json ops = nlohmann::json::object();
      for (int op = 0; op < par::kCommOpCount; ++op)
        ops[par::to_string(static_cast<par::CommOp>(op))] = op_mean[op];
      const nlohmann::json j = {{"bench", "olmo2_train_bench"},
                                {"mode", "distributed"},
                                {"size", o.sizes[0]},
                                {"precision", o.precision},
                                {"params", config.parameter_count()},
                                {"matmul_params", matmul_weights(config)},
                                {"world", world_size},
                                {"tp", l.tp},
                                {"pp", l.pp},
                                {"dp", l.dp},
                                {"zero_stage", o.zero_stage},
                                {"pp_virtual", o.pp_virtual},
                                {"threads_per_rank", threads},
                                {"hardware_threads", hw},
                                {"seq_len", o.seq_len},
                                {"batch", o.batch},
                                {"micro_batch", trainer.micro_batch()},
                                {"warmup", o.warmup},
                                {"steps", o.steps},
                                {"tokens_per_step", tokens},
                                {"model_flops_per_step", flops},
                                {"step_s", step_s},
                                {"tokens_per_s", tokens / step_s},
                                {"model_gflops", gflops},
                                {"sgemm_peak_gflops", peak},
                                {"sgemm_peak_definition", "one process, all hardware threads"},
                                {"mfu", gflops / peak},
                                {"comm_fraction_max", frac_max},
                                {"comm_fraction_mean", frac_mean},
                                {"comm_fraction_by_group_mean",
                                 {{"world", group_mean[0]},
                                  {"tp", group_mean[1]},
                                  {"pp", group_mean[2]},
                                  {"dp", group_mean[3]}}},
                                {"comm_fraction_by_op_mean", ops},
                                {"loss", last_loss}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
    world.barrier();
  } catch (const par::AgreedError& e) {  // thrown on every rank alike
    if (rank == 0) std::fprintf(stderr, "olmo2_train_bench: %s\n", e.what());
    status = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "olmo2_train_bench: [rank %d] %s\n", rank, e.what());
    if (world_size > 1) {  // the peers may be waiting in a collective
      std::error_code ec;
      if (rank == 0 && !dir.empty()) std::filesystem::remove_all(dir, ec);
      par::MpiRuntime::abort(1);
    }
    status = 1;
  }
  if (rank == 0 && !dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return status;
}

}  // namespace olmo2::bench
