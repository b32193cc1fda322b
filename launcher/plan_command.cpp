#include "launcher/plan_command.h"

#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "launcher/options.h"
#include "launcher/serve_options.h"
#include "runtime/model/config.h"
#include "runtime/serve/memory_size.h"
#include "runtime/train/train_options.h"

namespace olmo2 {

namespace po = boost::program_options;

void add_plan_options(po::options_description& d) {
  d.add_options()("model-config", po::value<std::string>(), "config.json of the model to plan for")(
      "model", po::value<std::string>(), "model directory (its config.json), instead of --model-config")(
      "zero-stage", po::value<int>(), "0 (default), 1, 2 or 3: what ZeRO shards over the data-parallel ranks")(
      "recompute", po::value<std::string>(), "none (default), selective or full: activation recomputation")(
      "precision", po::value<std::string>(), "fp32 (default) or bf16: bf16 compute copy beside f32 master weights")(
      "seq-len", po::value<int64_t>(), "tokens per sequence (required)")(
      "micro-batch", po::value<int64_t>(), "sequences per micro-batch (default 1)")(
      "global-batch", po::value<int64_t>(), "sequences per step (default: micro-batch x dp, one micro-batch each)")(
      "grad-bucket-mb", po::value<int64_t>(), "data-parallel gradient all-reduce bucket in MiB (default 25)")(
      "overlap", po::value<std::string>(), "on (default) or off, as train: gradient buckets reduced inside the backward")(
      "device", po::value<std::string>(), "cpu (default) or cuda: the runtime baseline added to every rank")(
      "runtime-memory", po::value<std::string>(), "the baseline per process instead of the device's default, e.g. 2GiB")(
      "memory-per-rank", po::value<std::string>(), "memory of one rank, e.g. 80GB: say whether the plan fits (exit 1 if not)")(
      "serve", po::bool_switch(), "plan olmo2 serve: weights in the checkpoint's dtype and the KV cache, no training state")(
      "kv-cache-memory", po::value<std::string>(), "with --serve: the KV cache of every rank, e.g. 20GiB")(
      "kv-cache-dtype", po::value<std::string>(),
      "with --serve: the KV cache's auto (default: bf16 under --precision bf16, f32 under fp32), bf16 or f32")(
      "format", po::value<std::string>(), "text (default) or json: one object");
}

PlanRequest read_plan_options(const po::variables_map& vm) {
  PlanRequest r;
  MemoryPlanOptions& o = r.options;
  if (vm.count("model-config") == vm.count("model")) {
    OLMO2_THROW(UsageError, "plan: give exactly one of --model-config FILE and --model DIR");
  }
  if (vm.count("model-config")) r.model_config = vm["model-config"].as<std::string>();
  if (vm.count("model")) r.model_dir = vm["model"].as<std::string>();
  if (!vm.count("seq-len")) OLMO2_THROW(UsageError, "plan: --seq-len is required");
  o.seq_len = vm["seq-len"].as<int64_t>();
  if (vm.count("micro-batch")) o.micro_batch = vm["micro-batch"].as<int64_t>();
  if (vm.count("global-batch")) o.global_batch = vm["global-batch"].as<int64_t>();
  if (vm.count("grad-bucket-mb")) o.grad_bucket_mb = vm["grad-bucket-mb"].as<int64_t>();
  if (vm.count("overlap")) {
    try {
      o.overlap = parse_overlap(vm["overlap"].as<std::string>(), "--overlap");
    } catch (const InputError& e) {
      OLMO2_THROW(UsageError, "plan: ", e.what());
    }
  }
  if (vm.count("zero-stage")) o.zero_stage = vm["zero-stage"].as<int>();
  if (vm.count("recompute")) o.recompute = vm["recompute"].as<std::string>();
  if (vm.count("precision")) o.precision = vm["precision"].as<std::string>();
  if (o.precision != "fp32" && o.precision != "bf16") {
    OLMO2_THROW(UsageError, "--precision must be fp32 or bf16, got \"", o.precision, "\"");
  }
  if (vm.count("device")) {
    const std::string d = vm["device"].as<std::string>();
    if (d != "cpu" && d != "cuda") OLMO2_THROW(UsageError, "--device must be cpu or cuda, got \"", d, "\"");
    o.device = d == "cuda" ? Device::CUDA : Device::CPU;
  }
  if (vm.count("format")) r.format = vm["format"].as<std::string>();
  if (r.format != "text" && r.format != "json") {
    OLMO2_THROW(UsageError, "--format must be text or json, got \"", r.format, "\"");
  }
  o.serve = vm["serve"].as<bool>();
  o.serve_dtype = o.precision == "bf16" ? DType::BF16 : DType::F32;
  auto size = [&](const char* name) {
    try {
      return parse_memory_size(vm[name].as<std::string>(), std::string("--") + name);
    } catch (const InputError& e) {
      OLMO2_THROW(UsageError, e.what());
    }
  };
  if (vm.count("kv-cache-memory")) {
    if (!o.serve) OLMO2_THROW(UsageError, "--kv-cache-memory plans serving: give --serve too");
    o.kv_cache_bytes = size("kv-cache-memory");
  }
  std::optional<DType> kv_dtype;
  if (vm.count("kv-cache-dtype")) {
    if (!o.serve) OLMO2_THROW(UsageError, "--kv-cache-dtype plans serving: give --serve too");
    kv_dtype = read_kv_cache_dtype(vm["kv-cache-dtype"].as<std::string>());
  }
  o.kv_cache_dtype = kv_cache_dtype(kv_dtype, o.precision == "bf16" ? Precision::BF16 : Precision::FP32);
  if (vm.count("memory-per-rank")) r.memory_per_rank = size("memory-per-rank");
  if (vm.count("runtime-memory")) o.runtime_bytes = size("runtime-memory");
  return r;
}

namespace {

/// "0-3, 8-11" for sorted ranks.
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}

/// The rank indices with identical numbers, in order of their first rank.
std::vector<std::vector<int>> equal_ranks(const MemoryPlan& plan) {
  auto key = [](const RankMemory& m) {
    return std::make_tuple(m.coords.pp, m.weights, m.master_weights, m.gradients, m.optimizer, m.activations,
                           m.working, m.comm_buffers, m.kv_cache, m.kv_block_bytes, m.sent_tp, m.sent_pp, m.sent_dp,
                           m.sent_cp);
  };
  std::map<decltype(key(plan.ranks[0])), size_t> index;
  std::vector<std::vector<int>> groups;
  for (const RankMemory& m : plan.ranks) {
    const auto [it, fresh] = index.emplace(key(m), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(m.rank);
  }
  return groups;
}

nlohmann::json rank_json(const RankMemory& m) {
  return {{"rank", m.rank}, {"tp", m.coords.tp}, {"cp", m.coords.cp}, {"dp", m.coords.dp}, {"pp", m.coords.pp},
          {"layers", m.layers},
          {"weights", m.weights}, {"master_weights", m.master_weights}, {"gradients", m.gradients},
          {"optimizer", m.optimizer}, {"activations_per_micro_batch", m.activations_per_micro_batch},
          {"micro_batches_held", m.micro_batches_held}, {"activations", m.activations}, {"working", m.working},
          {"working_phase", m.working_phase}, {"comm_buffers", m.comm_buffers}, {"kv_cache", m.kv_cache},
          {"kv_block_bytes", m.kv_block_bytes},
          {"runtime", m.runtime}, {"total", m.total},
          {"sent_per_step", {{"tp", m.sent_tp}, {"pp", m.sent_pp}, {"dp", m.sent_dp}, {"cp", m.sent_cp}}}};
}

std::string cell(const std::string& s, size_t width) { return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' '); }

void print_text(const MemoryPlan& plan, const std::string& model, const PlanRequest& r, std::ostream& out) {
  const MemoryPlanOptions& o = plan.options;
  const parallel::Layout& l = o.layout;
  out << "memory plan of " << model << ": " << parallel::to_string(l) << " = " << l.tp * l.pp * l.dp * l.cp << " ranks, "
      << (o.serve ? "serving (" + std::string(dtype_name(o.serve_dtype)) + " weights, KV cache " +
                        format_gb(o.kv_cache_bytes) + ": " + std::to_string(plan.kv_blocks) + " " +
                        dtype_name(o.kv_cache_dtype) + " blocks of " + std::to_string(o.kv_block_size) + ")"
                  : "ZeRO-" + std::to_string(o.zero_stage) + ", recompute " + o.recompute + ", " + o.precision)
      << " on " << (o.device == Device::CUDA ? "cuda" : "cpu") << "\n";
  if (!o.serve) {
    out << "seq " << o.seq_len << " x micro-batch " << o.micro_batch << ", " << plan.micro_batches
        << " micro-batch(es) per data-parallel rank per step\n";
  }
  const std::vector<std::vector<int>> groups = equal_ranks(plan);
  constexpr size_t kName = 24, kCol = 28;
  out << "\n" << cell("", kName);
  for (const auto& g : groups) {
    const RankMemory& m = plan.ranks[static_cast<size_t>(g.front())];
    out << cell("ranks " + rank_list(g) + (l.pp > 1 ? " (stage " + std::to_string(m.coords.pp) + ")" : ""), kCol);
  }
  out << "\n";
  auto row = [&](const std::string& name, const std::function<std::string(const RankMemory&)>& value) {
    out << cell(name, kName);
    for (const auto& g : groups) out << cell(value(plan.ranks[static_cast<size_t>(g.front())]), kCol);
    out << "\n";
  };
  auto bytes = [&](const std::string& name, int64_t RankMemory::*field) {
    row(name, [&](const RankMemory& m) { return format_gb(m.*field); });
  };
  bytes("weights", &RankMemory::weights);
  if (!o.serve) {
    bytes("master weights", &RankMemory::master_weights);
    bytes("gradients", &RankMemory::gradients);
    bytes("optimizer moments", &RankMemory::optimizer);
    const int V = o.pp_virtual;
    row("activations", [V](const RankMemory& m) {
      if (V > 1 && m.activations_per_micro_batch > 0) {  // (micro-batch, chunk) pairs of 1/V each
        const int64_t pairs = m.activations * V / m.activations_per_micro_batch;
        return format_gb(m.activations) + " (" + std::to_string(pairs) + " chunks x " +
               format_gb(m.activations_per_micro_batch / V) + ")";
      }
      return format_gb(m.activations) + " (" + std::to_string(m.micro_batches_held) + " x " +
             format_gb(m.activations_per_micro_batch) + ")";
    });
    bytes("working memory", &RankMemory::working);
    bytes("communication buffers", &RankMemory::comm_buffers);
  } else {
    bytes("KV cache", &RankMemory::kv_cache);
    row("KV block", [](const RankMemory& m) { return std::to_string(m.kv_block_bytes) + " bytes"; });
  }
  bytes("runtime", &RankMemory::runtime);
  bytes("total", &RankMemory::total);
  if (!o.serve) {
    out << "\nworking memory is the largest transient:";
    for (const auto& g : groups) out << "\n  ranks " << rank_list(g) << ": " << plan.ranks[static_cast<size_t>(g.front())].working_phase;
    out << "\n\nbytes each rank sends per step\n";
    row("tensor parallel", [](const RankMemory& m) { return format_gb(m.sent_tp); });
    row("pipeline", [](const RankMemory& m) { return format_gb(m.sent_pp); });
    row("data parallel", [](const RankMemory& m) { return format_gb(m.sent_dp); });
    if (l.cp > 1) row("context parallel", [](const RankMemory& m) { return format_gb(m.sent_cp); });
  }
  const RankMemory& worst = plan.largest();
  if (r.memory_per_rank > 0) {
    out << "\n" << (worst.total <= r.memory_per_rank ? "fits in " : "does not fit in ") << format_gb(r.memory_per_rank)
        << " per rank: the largest is rank " << worst.rank << " with " << format_gb(worst.total) << "\n";
  } else {
    out << "\nthe largest is rank " << worst.rank << " with " << format_gb(worst.total) << "\n";
  }
}

}  // namespace

int run_plan(const PlanRequest& r, std::ostream& out, std::ostream& err) {
  const std::string model = r.model_config.empty() ? r.model_dir : r.model_config;
  const ModelConfig c = r.model_config.empty() ? ModelConfig::load(r.model_dir) : ModelConfig::load_file(r.model_config);
  const MemoryPlan plan = plan_memory(c, r.options);
  const RankMemory& worst = plan.largest();
  const bool fits = r.memory_per_rank == 0 || worst.total <= r.memory_per_rank;
  if (r.format == "json") {
    const MemoryPlanOptions& o = plan.options;
    nlohmann::json j = {{"model", model},
                        {"layout", {{"tp", o.layout.tp}, {"pp", o.layout.pp}, {"dp", o.layout.dp}, {"cp", o.layout.cp},
                                    {"pp_virtual", o.pp_virtual}}},
                        {"serve", o.serve},
                        {"zero_stage", o.zero_stage},
                        {"recompute", o.recompute},
                        {"precision", o.precision},
                        {"device", o.device == Device::CUDA ? "cuda" : "cpu"},
                        {"seq_len", o.seq_len},
                        {"micro_batch", o.micro_batch},
                        {"micro_batches_per_step", plan.micro_batches},
                        {"kv_cache_bytes", o.kv_cache_bytes},
                        {"kv_cache_dtype", o.serve ? nlohmann::json(dtype_name(o.kv_cache_dtype)) : nlohmann::json()},
                        {"kv_blocks", o.serve ? nlohmann::json(plan.kv_blocks) : nlohmann::json()},
                        {"largest", {{"rank", worst.rank}, {"total", worst.total}}},
                        {"memory_per_rank", r.memory_per_rank > 0 ? nlohmann::json(r.memory_per_rank) : nlohmann::json()},
                        {"fits", r.memory_per_rank > 0 ? nlohmann::json(fits) : nlohmann::json()},
                        {"ranks", nlohmann::json::array()}};
    for (const RankMemory& m : plan.ranks) j["ranks"].push_back(rank_json(m));
    out << j.dump() << "\n";
  } else {
    print_text(plan, model, r, out);
  }
  if (fits) return 0;
  err << "olmo2: error: the plan does not fit in --memory-per-rank " << format_gb(r.memory_per_rank) << ": rank "
      << worst.rank << " " << parallel::to_string(worst.coords) << " needs " << format_gb(worst.total) << " ("
      << largest_components(worst) << ")\n";
  return 1;
}

}  // namespace olmo2
