// Training-step throughput of OLMo 2 models built in memory, against OpenBLAS sgemm
// measured in the same run (bench/README.md, "Training step").
//
//   olmo2_train_bench [--sizes demo,wide] [--steps 3] [--seq-len 128] [--batch 8]
//                     [--micro-batch B] [--threads N] [--sgemm-size 2048] [--sgemm-reps 3]
//                     [--demo-config configs/olmo2-demo-27m.json]
//
// One step = zero grads, forward_backward over the micro-batches, global grad norm, clip
// (max norm 1), AdamW — what Trainer::step does, without the data loader. One untimed
// warm-up step, then --steps timed ones on fresh random tokens.
//
// Distributed mode (any of --tp/--pp/--dp given; run under mpirun, world = tp·pp·dp):
//
//   mpirun -np 8 olmo2_train_bench --tp 2 --pp 2 --dp 2 [--sizes demo] [--steps 3] [--warmup 1]
//          [--seq-len 128] [--batch 8] [--micro-batch M] [--zero-stage 0|1] [--threads N] [--tmp-dir DIR]
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
//
// Model FLOPs per step (the MFU numerator), B sequences of T tokens:
//   B·T · (6·N + 12·L·H·hd·(T+1)/2)
// N = weights that enter a matrix product (per layer q, k, v, o, gate, up, down, plus
// lm_head; not the embedding lookup, norms or the loss). A matrix product with N weights
// costs 2·N FLOPs per token forward and 4·N backward (input and weight gradients). Causal
// attention: query t (1-based) attends to t keys, QKᵀ and PV cost 2·H·hd·t each forward, so
// 4·H·hd·t per layer, 4·L·H·hd·(T+1)/2 per token on average over t = 1..T; the backward
// is twice that (dQ, dK, dV, dP), hence ×3. It equals 3·Olmo2Model::forward_flops(B·T, (T+1)/2).
#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ops/gemm.h"
#include "ops/tensor.h"
#include "ops/threads.h"
#include "parallel/agreement.h"
#include "parallel/mpi_runtime.h"
#include "parallel/process_groups.h"
#include "parallel/timed_communicator.h"
#include "runtime/config.h"
#include "runtime/data_loader.h"
#include "runtime/init.h"
#include "runtime/model.h"
#include "runtime/npy.h"
#include "runtime/optimizer.h"
#include "runtime/parameters.h"
#include "runtime/train_step.h"
#include "runtime/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;
using olmo2::ModelConfig;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  std::vector<std::string> sizes{"demo", "wide"};
  int64_t steps = 3, seq_len = 128, batch = 8, micro_batch = 0;  // micro 0: = batch
  int threads = 0;                                               // 0: all hardware threads
  int64_t sgemm_size = 2048, sgemm_reps = 3;
  std::string demo_config = std::string(OLMO2_SOURCE_DIR) + "/configs/olmo2-demo-27m.json";
  // Distributed mode (--tp/--pp/--dp given).
  bool distributed = false, sizes_given = false;
  int tp = 1, pp = 1, dp = 0;  // dp 0: world / (tp · pp)
  int zero_stage = 0;
  int64_t warmup = 1;
  std::string tmp_dir;  // "": the system's temporary directory
};

[[noreturn]] void usage_error(const std::string& msg, int status = 2) {
  std::fprintf(status ? stderr : stdout,
               "olmo2_train_bench: %s\n"
               "usage: olmo2_train_bench [--sizes demo,wide|FILE.json,...] [--steps 3] [--seq-len 128]\n"
               "         [--batch 8] [--micro-batch B] [--threads N] [--sgemm-size 2048] [--sgemm-reps 3]\n"
               "         [--demo-config PATH]\n"
               "       mpirun -np W olmo2_train_bench --tp T --pp P [--dp D] [--sizes demo] [--steps 3] [--warmup 1]\n"
               "         [--seq-len 128] [--batch 8] [--micro-batch M] [--zero-stage 0|1] [--threads N] [--tmp-dir DIR]\n",
               msg.c_str());
  std::exit(status);
}

int64_t parse_positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1) usage_error(flag + ": expected a positive integer, got '" + v + "'");
  return n;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (flag == "--help" || flag == "-h") {
      usage_error("training-step throughput and MFU (bench/README.md)", 0);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage_error(flag + " needs a value");
    }
    if (flag == "--sizes") {
      o.sizes.clear();
      std::stringstream ss(value);
      for (std::string s; std::getline(ss, s, ',');) if (!s.empty()) o.sizes.push_back(s);
      if (o.sizes.empty()) usage_error("--sizes: empty");
      o.sizes_given = true;
    } else if (flag == "--tp" || flag == "--pp" || flag == "--dp") {
      const int n = static_cast<int>(std::min<int64_t>(parse_positive(flag, value), 1 << 20));
      (flag == "--tp" ? o.tp : flag == "--pp" ? o.pp : o.dp) = n;
      o.distributed = true;
    } else if (flag == "--zero-stage") {
      if (value != "0" && value != "1") usage_error("--zero-stage: expected 0 or 1, got '" + value + "'");
      o.zero_stage = value == "1";
    } else if (flag == "--warmup") o.warmup = parse_positive(flag, value);
    else if (flag == "--tmp-dir") o.tmp_dir = value; else if (flag == "--steps") o.steps = parse_positive(flag, value);
    else if (flag == "--seq-len") o.seq_len = parse_positive(flag, value);
    else if (flag == "--batch") o.batch = parse_positive(flag, value);
    else if (flag == "--micro-batch") o.micro_batch = parse_positive(flag, value);
    else if (flag == "--threads") o.threads = static_cast<int>(std::min<int64_t>(parse_positive(flag, value), 4096));
    else if (flag == "--sgemm-size") o.sgemm_size = parse_positive(flag, value);
    else if (flag == "--sgemm-reps") o.sgemm_reps = parse_positive(flag, value);
    else if (flag == "--demo-config") o.demo_config = value;
    else usage_error("unknown flag " + flag);
  }
  if (o.seq_len < 2) usage_error("--seq-len must be at least 2 (one target per sequence)");
  if (o.distributed) {
    if (!o.sizes_given) o.sizes = {"demo"};
    if (o.sizes.size() != 1) usage_error("--sizes: the distributed mode takes one size");
    return o;  // the micro-batch default needs dp (run_distributed)
  }
  if (o.micro_batch == 0) o.micro_batch = o.batch;
  if (o.batch % o.micro_batch != 0) usage_error("--micro-batch must divide --batch");
  return o;
}

/// "demo": configs/olmo2-demo-27m.json; "wide": hidden 512, 8 layers of 8 heads of 64,
/// intermediate 1536, vocab 100352, untied (≈130M parameters); else a config.json path.
ModelConfig size_config(const std::string& size, const Options& o) {
  if (size == "demo") return ModelConfig::load_file(o.demo_config);
  if (size != "wide") return ModelConfig::load_file(size);
  ModelConfig c;
  c.vocab_size = 100352;
  c.hidden_size = 512;
  c.intermediate_size = 1536;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 8;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 500000.0;
  c.tie_word_embeddings = false;
  return c;
}

/// Weights that enter a matrix product: per layer q, k, v, o, gate, up, down; lm_head
/// (the embedding matrix when tied). Not the embedding lookup or the norm gains.
double matmul_weights(const ModelConfig& c) {
  const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.num_attention_heads * c.head_dim),
               kv = static_cast<double>(c.num_key_value_heads * c.head_dim),
               inter = static_cast<double>(c.intermediate_size);
  return static_cast<double>(c.num_hidden_layers) * (2 * h * q + 2 * h * kv + 3 * h * inter) +
         static_cast<double>(c.vocab_size) * h;
}

/// Model FLOPs of one training step over `sequences` sequences of `t` tokens (header).
double train_step_flops(const ModelConfig& c, int64_t sequences, int64_t t) {
  const double tokens = static_cast<double>(sequences * t);
  const double attention = 12.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim) *
                           (static_cast<double>(t) + 1.0) / 2.0;
  return tokens * (6.0 * matmul_weights(c) + attention);
}

/// Best GFLOP/s of a square n×n×n sgemm (ops::linear, the model's cblas_sgemm call)
/// over `reps` timed runs after one warm-up, at the current thread count.
double sgemm_gflops(int64_t n, int64_t reps) {
  const olmo2::Tensor x = olmo2::Tensor::zeros({n, n}), w = olmo2::Tensor::zeros({n, n}),
                      y = olmo2::Tensor::zeros({n, n});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const olmo2::Tensor* t : {&x, &w}) std::generate(t->f32(), t->f32() + t->numel(), [&] { return dist(rng); });
  olmo2::ops::linear(x.view(), w.view(), y.view());
  double best = 1e300;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    olmo2::ops::linear(x.view(), w.view(), y.view());
    best = std::min(best, seconds_since(t0));
  }
  return olmo2::ops::linear_flops(n, n, n) / best * 1e-9;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  return f >> a >> b >> c ? a + " " + b + " " + c : "unknown";
}

/// Random micro-batches of one step: ids uniform over the vocabulary, labels the ids
/// shifted left with kIgnoreIndex last (as the data loader makes them).
std::vector<std::vector<olmo2::Sample>> random_batches(const ModelConfig& c, const Options& o, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<std::vector<olmo2::Sample>> micro(o.batch / o.micro_batch);
  for (auto& mb : micro) {
    for (int64_t s = 0; s < o.micro_batch; ++s) {
      olmo2::Sample smp;
      for (int64_t i = 0; i < o.seq_len; ++i) smp.input_ids.push_back(id(rng));
      smp.labels.assign(smp.input_ids.begin() + 1, smp.input_ids.end());
      smp.labels.push_back(olmo2::kIgnoreIndex);
      mb.push_back(std::move(smp));
    }
  }
  return micro;
}

struct StepTimes {
  double zero = 0, fwd_bwd = 0, norm_clip = 0, adamw = 0;
  double total() const { return zero + fwd_bwd + norm_clip + adamw; }
  double optimizer() const { return zero + norm_clip + adamw; }  // everything but fwd+bwd
};

struct SizeResult {
  std::string size;
  ModelConfig config;
  int64_t params = 0;
  double matmul_n = 0, flops = 0;
  StepTimes mean;
  double best_step = 1e300, last_loss = 0, build_s = 0;
};

SizeResult run_size(const std::string& size, const Options& o) {
  SizeResult r;
  r.size = size;
  r.config = size_config(size, o);
  const ModelConfig& c = r.config;
  if (o.seq_len > c.max_position_embeddings) {
    throw std::runtime_error(size + ": --seq-len exceeds max_position_embeddings " +
                             std::to_string(c.max_position_embeddings));
  }
  r.params = c.parameter_count();
  r.matmul_n = matmul_weights(c);
  r.flops = train_step_flops(c, o.batch, o.seq_len);
  std::fprintf(stderr, "[%s] building %lld parameters (hidden %lld, %lld layers, %lld heads, inter %lld, vocab %lld)\n",
               size.c_str(), static_cast<long long>(r.params), static_cast<long long>(c.hidden_size),
               static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.num_attention_heads),
               static_cast<long long>(c.intermediate_size), static_cast<long long>(c.vocab_size));

  const auto tb = Clock::now();
  const olmo2::ShardSpec whole = olmo2::ShardSpec::whole(c);
  auto model = std::make_unique<olmo2::Olmo2Model>(
      olmo2::Olmo2Model::from_weights(c, whole, olmo2::zero_weights(c, whole)));
  olmo2::ModelWeights grads = olmo2::zeros_like_weights(model->weights());
  std::vector<olmo2::Parameter> params = olmo2::list_parameters(model->mutable_weights(), grads, c, whole);
  olmo2::init_parameters(params, /*seed=*/1234);
  olmo2::AdamW adamw(params);
  r.build_s = seconds_since(tb);

  // Keep the header formula and Olmo2Model::forward_flops in agreement.
  const double via_model = 3.0 * model->forward_flops(o.batch * o.seq_len, (static_cast<double>(o.seq_len) + 1) / 2);
  if (std::abs(via_model - r.flops) > 1e-9 * r.flops) {
    std::fprintf(stderr, "[%s] warning: FLOP formula %.6g != 3*forward_flops %.6g\n", size.c_str(), r.flops, via_model);
  }

  std::mt19937 rng(42);
  const int64_t targets = o.batch * (o.seq_len - 1);
  const float scale = 1.0f / static_cast<float>(targets);
  constexpr float kZLoss = 1e-5f;
  constexpr double kLr = 3e-4, kMaxNorm = 1.0;
  for (int64_t step = 0; step <= o.steps; ++step) {  // step 0: warm-up
    const auto batches = random_batches(c, o, rng);
    StepTimes t;
    auto t0 = Clock::now();
    for (const olmo2::Parameter& p : params) std::fill(p.grad->f32(), p.grad->f32() + p.numel(), 0.0f);
    t.zero = seconds_since(t0);
    t0 = Clock::now();
    olmo2::LossSums sums;
    for (const auto& mb : batches) sums += olmo2::forward_backward(*model, grads, mb, kZLoss, scale);
    t.fwd_bwd = seconds_since(t0);
    t0 = Clock::now();
    const double norm = std::sqrt(olmo2::grad_norm_squared_local(params, true));
    olmo2::clip_grad_norm(params, norm, kMaxNorm);
    t.norm_clip = seconds_since(t0);
    t0 = Clock::now();
    adamw.step(params, kLr);
    t.adamw = seconds_since(t0);
    r.last_loss = sums.ce_sum / static_cast<double>(sums.count);
    std::fprintf(stderr, "[%s] %s %lld: %.3f s (fwd+bwd %.3f, opt+norm %.3f) loss %.4f grad norm %.4f\n",
                 size.c_str(), step ? "step" : "warm-up", static_cast<long long>(step), t.total(), t.fwd_bwd,
                 t.optimizer(), r.last_loss, norm);
    if (step == 0) continue;
    r.mean.zero += t.zero / static_cast<double>(o.steps);
    r.mean.fwd_bwd += t.fwd_bwd / static_cast<double>(o.steps);
    r.mean.norm_clip += t.norm_clip / static_cast<double>(o.steps);
    r.mean.adamw += t.adamw / static_cast<double>(o.steps);
    r.best_step = std::min(r.best_step, t.total());
  }
  return r;
}

// ---- Distributed mode ------------------------------------------------------------------

namespace par = olmo2::parallel;

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
    to.tp = l.tp, to.pp = l.pp, to.dp = l.dp;
    to.zero_stage = o.zero_stage;
    to.collective_timeout = 600;

    if (rank == 0) {
      std::printf(
          "olmo2_train_bench: Trainer::step on %d ranks (tp %d, pp %d, dp %d%s), %d threads "
          "per rank (%d ranks on this node x %d = %d on %d hardware threads; rank 0 may use %d "
          "CPUs), OpenBLAS core %s, load average %s\n",
          world_size, l.tp, l.pp, l.dp, o.zero_stage ? ", ZeRO-1" : "", threads, groups.local_size,
          threads, groups.local_size * threads, hw, affinity_cpus(), openblas_get_corename(),
          load_average().c_str());
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
                                {"params", config.parameter_count()},
                                {"matmul_params", matmul_weights(config)},
                                {"world", world_size},
                                {"tp", l.tp},
                                {"pp", l.pp},
                                {"dp", l.dp},
                                {"zero_stage", o.zero_stage},
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

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  if (o.distributed) return run_distributed(o);
  const int threads = o.threads ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  try {
    olmo2::set_num_threads(threads);
    std::printf("olmo2_train_bench: threads %d, OpenBLAS core %s, load average %s\n", threads,
                openblas_get_corename(), load_average().c_str());
    std::printf("  seq_len %lld, batch %lld sequences (%lld micro-batches of %lld), 1 warm-up + %lld timed steps\n",
                static_cast<long long>(o.seq_len), static_cast<long long>(o.batch),
                static_cast<long long>(o.batch / o.micro_batch), static_cast<long long>(o.micro_batch),
                static_cast<long long>(o.steps));
    std::printf("  step = zero grads + forward_backward (z-loss 1e-5) + grad norm + clip 1.0 + AdamW (lr 3e-4)\n");
    std::printf("  model FLOPs/step = B*T * (6*N + 12*L*H*hd*(T+1)/2); N = matmul weights incl. lm_head, "
                "not the embedding\n");
    std::fflush(stdout);

    const double peak_start = sgemm_gflops(o.sgemm_size, o.sgemm_reps);
    std::vector<SizeResult> results;
    for (const std::string& s : o.sizes) results.push_back(run_size(s, o));
    const double peak_end = sgemm_gflops(o.sgemm_size, o.sgemm_reps);
    const double peak = std::max(peak_start, peak_end);
    std::printf("  sgemm %lld^3 (best of %lld): %.1f GFLOP/s before, %.1f after; peak = %.1f; load average now %s\n\n",
                static_cast<long long>(o.sgemm_size), static_cast<long long>(o.sgemm_reps), peak_start, peak_end,
                peak, load_average().c_str());

    std::printf("%-6s %11s %11s %8s %9s %9s %9s %9s %9s %7s\n", "size", "params", "N(matmul)", "tok/step",
                "step s", "fwd+bwd s", "opt s", "tokens/s", "GFLOP/s", "MFU");
    for (const SizeResult& r : results) {
      const double step = r.mean.total(), tokens = static_cast<double>(o.batch * o.seq_len);
      std::printf("%-6s %11lld %11.0f %8.0f %9.3f %9.3f %9.3f %9.1f %9.1f %6.1f%%\n", r.size.c_str(),
                  static_cast<long long>(r.params), r.matmul_n, tokens, step, r.mean.fwd_bwd, r.mean.optimizer(),
                  tokens / step, r.flops / step * 1e-9, 100.0 * r.flops / step * 1e-9 / peak);
    }
    std::printf("\n");
    for (const SizeResult& r : results) {
      const double step = r.mean.total(), tokens = static_cast<double>(o.batch * o.seq_len);
      const nlohmann::json j = {
          {"bench", "olmo2_train_bench"},
          {"size", r.size},
          {"params", r.params},
          {"matmul_params", r.matmul_n},
          {"hidden", r.config.hidden_size},
          {"layers", r.config.num_hidden_layers},
          {"heads", r.config.num_attention_heads},
          {"intermediate", r.config.intermediate_size},
          {"vocab", r.config.vocab_size},
          {"threads", threads},
          {"seq_len", o.seq_len},
          {"batch", o.batch},
          {"micro_batch", o.micro_batch},
          {"steps", o.steps},
          {"tokens_per_step", tokens},
          {"model_flops_per_step", r.flops},
          {"step_s", step},
          {"best_step_s", r.best_step},
          {"zero_grad_s", r.mean.zero},
          {"fwd_bwd_s", r.mean.fwd_bwd},
          {"norm_clip_s", r.mean.norm_clip},
          {"adamw_s", r.mean.adamw},
          {"tokens_per_s", tokens / step},
          {"model_gflops", r.flops / step * 1e-9},
          {"sgemm_peak_gflops", peak},
          {"mfu", r.flops / step * 1e-9 / peak},
          {"loss", r.last_loss},
          {"build_s", r.build_s},
      };
      std::printf("%s\n", j.dump().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "olmo2_train_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
