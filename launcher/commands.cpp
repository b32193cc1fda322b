#include "launcher/commands.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <span>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/device_options.h"
#include "launcher/exit_status.h"
#include "launcher/rank_session.h"
#include "launcher/trace_files.h"
#include "ops/bf16_gemm.h"
#include "ops/blas_core.h"
#include "parallel/agreement.h"
#include "parallel/mpi_runtime.h"
#include "runtime/model/config.h"
#include "runtime/generation/generate.h"
#include "runtime/io/checkpoint_files.h"
#include "runtime/model/model.h"
#include "runtime/tokenizer/tokenize_corpus.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/train/trainer.h"

namespace olmo2 {

void run_info(const CliConfig& cfg, std::ostream& out) {
  const ModelConfig c = ModelConfig::load(cfg.model);
  // The plan first: a layout the model cannot take is refused before anything is printed.
  std::string plan;
  if (cfg.layout.given) {
    const parallel::PartitionPlan p = rank_plan(cfg.layout, /*world=*/0, c);
    plan = parallel::describe(p, c.dtype);
    if (cfg.layout.pp_virtual_given) plan += parallel::describe_chunks(p);
  }
  out << "model " << cfg.model << "\n" << c.summary();
  const double gib = static_cast<double>(c.parameter_count()) * dtype_size(c.dtype) / (1u << 30);
  out << "weight bytes            " << c.parameter_count() * static_cast<int64_t>(dtype_size(c.dtype))
      << " (" << gib << " GiB as " << dtype_name(c.dtype) << ")\n";
  out << plan;
}

namespace {
/// Prints a generation: text or JSON; the reads (when any) go to `activations_out` when
/// it is open, else into the JSON object ("activations") or, as text, one line
/// "activations: JSON" after finish_reason (docs/architecture.md §12).
void print_result(const CliConfig& cfg, const GenerateResult& r, std::ostream& out, std::ofstream* activations_out) {
  const bool reads = !r.activations.is_null();
  if (reads && activations_out) {
    *activations_out << r.activations.dump() << "\n";
    activations_out->flush();
    if (!*activations_out) OLMO2_THROW(InputError, "--activations-out: cannot write ", cfg.trace.activations_out);
  }
  const bool inline_reads = reads && !activations_out;
  std::string text;
  if (!cfg.prompt.empty()) text = Tokenizer::from_file(cfg.tokenizer).decode(r.output_ids, true);
  if (cfg.format == "json") {
    nlohmann::json j = {{"prompt_ids", cfg.prompt_ids},
                        {"output_ids", r.output_ids},
                        {"finish_reason", r.finish_reason}};
    if (!cfg.prompt.empty()) j["prompt"] = cfg.prompt, j["text"] = text;
    if (inline_reads) j["activations"] = r.activations;
    out << j.dump() << "\n";
    return;
  }
  if (!cfg.prompt.empty()) {
    out << cfg.prompt << text << "\nfinish_reason: " << r.finish_reason << "\n";
  } else {
    out << "output_ids:";
    for (size_t i = 0; i < r.output_ids.size(); ++i) out << (i ? "," : " ") << r.output_ids[i];
    out << "\nfinish_reason: " << r.finish_reason << "\n";
  }
  if (inline_reads) out << "activations: " << r.activations.dump() << "\n";
}
}  // namespace

namespace {
/// generation_config.json's defaults where the command line left a value out, as
/// transformers' generate() takes them (docs/architecture.md §8, "Stop ids and sampling
/// defaults"): temperature, top_k and top_p only when its do_sample is true; the
/// repetition penalty always; max_new_tokens as --max-tokens, cut to the context's room.
void apply_generation_defaults(const GenerationDefaults& d, const ModelConfig& c, CliConfig& cfg) {
  cfg.sampling = apply_generate_defaults(cfg.sampling, d, cfg.given.temperature, cfg.given.top_k, cfg.given.top_p);
  if (!cfg.given.repetition_penalty && d.repetition_penalty) cfg.repetition_penalty = *d.repetition_penalty;
  if (!cfg.given.max_tokens && d.max_new_tokens) {
    const int64_t room = c.max_position_embeddings - static_cast<int64_t>(cfg.prompt_ids.size());
    cfg.max_tokens = std::max<int64_t>(1, std::min(*d.max_new_tokens, room));
  }
}
}  // namespace

void run_generate(const CliConfig& given, std::ostream& out, bool under_mpi_launcher) {
  CliConfig cfg = given;
  if (!cfg.prompt.empty()) {
    if (!std::filesystem::is_regular_file(cfg.tokenizer)) {
      OLMO2_THROW(InputError, "--prompt needs a tokenizer: no file ", cfg.tokenizer,
                  " (give --tokenizer FILE or use --prompt-ids)");
    }
    cfg.prompt_ids = Tokenizer::from_file(cfg.tokenizer).encode(cfg.prompt);
  }
  trace::TraceSpec spec;  // named activations (docs/architecture.md §13): empty unless asked
  std::ofstream activations_out;
  std::ofstream* const reads_file = cfg.trace.activations_out.empty() ? nullptr : &activations_out;
  RankSessionSpec session = rank_session_spec(cfg, under_mpi_launcher);
  session.model = cfg.model;
  session.checks = [&](const ModelConfig& c, const ModelDirectoryFindings& found) {
    if (found.generation) apply_generation_defaults(found.generation->defaults, c, cfg);
    check_generate_request(c, cfg.prompt_ids, cfg.max_tokens);
    if (cfg.trace.any()) spec = cfg.trace.spec(c);
  };
  session.print_device = true;
  run_rank_session(session, [&](RankSession& s) {
    const int rank = s.rank();
    // A checkpoint's files are verified before any weight is read, each rank its share.
    // (And rank 0 opens --activations-out: a path it cannot write ends every rank alike.)
    parallel::agree(s.world(), [&] {
      verify_model_directory(cfg.model, {rank, s.world_size()}, rank == 0 ? &std::cerr : nullptr);
      if (reads_file && rank == 0) activations_out = open_output_file(cfg.trace.activations_out, "--activations-out");
    });
    Olmo2Model model = Olmo2Model::load(cfg.model, s.shard, cfg.precision, s.device.device, cfg.weights);
    model.add_generation_eos_token_ids(s.config->generation_eos_token_ids);
    if (rank == 0 && model.quantization()) std::cerr << "weights: " << quantization_text(*model.quantization()) << std::endl;
    if (rank == 0 && s.directory.generation && (!s.config->generation_eos_token_ids.empty() ||
                                                s.directory.generation->defaults.any() ||
                                                s.directory.generation->defaults.do_sample)) {
      std::cerr << describe_generation_source(*s.config, cfg.directory, s.directory, true) << std::endl;
    }
    LogitsAdjustments adjust;
    adjust.repetition_penalty = cfg.repetition_penalty;
    // Every data-parallel replica computes the same tokens; world rank 0's sends the reads.
    const GenerateTrace traced{&spec, s.world(), s.coords().dp == 0};
    const GenerateResult r = generate(model, cfg.prompt_ids, cfg.max_tokens, cfg.sampling, s.parallel_context(), traced,
                                       cfg.kv_cache_dtype, adjust);
    if (rank == 0) print_result(cfg, r, out, reads_file);
  });
}

}  // namespace olmo2

namespace olmo2 {
namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }
}  // namespace

namespace {
void print_banner(const Trainer& trainer, const TrainOptions& o, const std::string& layout, const DeviceChoice& dev) {
  const ModelConfig& c = trainer.model().config();
  // The whole line is made first: a failing query must not leave half of it printed.
  std::ostringstream line;
  line << "training " << c.parameter_count() << " parameters (" << c.num_hidden_layers << " layers, hidden "
            << c.hidden_size << ", vocab " << c.vocab_size << ") for " << o.steps << " steps of " << o.global_batch
            << " x " << o.seq_len << " tokens" << layout << ", " << o.precision
            << (o.precision == "bf16" ? " (f32 master weights, " +
                                            (o.device == Device::CPU ? ops::bf16_training_gemm_path_description()
                                                                     : std::string("cuBLASLt")) +
                                            " bf16 products)"
                                      : std::string())
            << (o.device == Device::CPU ? "; OpenBLAS " + std::string(blas_core_name()) + " kernels; "
                                        : std::string("; cuBLASLt products; "))
            << dev.description << "\n";
  std::cerr << line.str();
}

/// A job that ends with a non-zero status ends this long after rank 0 decided it: every
/// rank exits at that one moment (see the end of run_train).
constexpr int64_t kExitDelayUs = 500'000;

/// The exit status for how a run ended (docs/architecture.md §12 "Exit status"); a stop
/// with nothing to resume from is a failure, said once (by `root`).
int train_exit_status(RunEnd end, const Trainer& trainer, bool root) {
  switch (end) {
    case RunEnd::kFinished:
      return kExitFinished;
    case RunEnd::kStoppedWithCheckpoint:
      return kExitStoppedEarly;
    case RunEnd::kStoppedWithoutCheckpoint:
      if (root) {
        std::cerr << "olmo2: error: stopped at step " << trainer.steps_done()
                  << " without a checkpoint (no --save-dir)" << std::endl;
      }
      return kExitFailed;
  }
  return kExitFailed;
}
}  // namespace

int run_train(const CliConfig& cfg, bool under_mpi_launcher) {
  const TrainOptions& o = cfg.train;
  // SIGTERM/SIGINT (Slurm pre-emption, Ctrl-C) and SIGUSR1 (which mpirun forwards to
  // every rank without killing the job) stop after the current step, with a checkpoint.
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) std::signal(sig, on_stop_signal);
  int status = kExitFailed;
  int64_t exit_at_us = 0;  // rank 0's system clock, in µs since the epoch
  bool distributed = false;
  const RankSessionSpec session = rank_session_spec(cfg, under_mpi_launcher);
  run_rank_session(session, [&](RankSession& s) {
    distributed = s.distributed();
    Trainer trainer(o, s.groups.get());
    const parallel::Layout l = s.topology.layout();
    if (s.rank() == 0) {
      print_banner(trainer, o,
                   !distributed ? " on " + s.placement
                                : " on " + std::to_string(s.world_size()) + " ranks (tp " + std::to_string(l.tp) +
                                      ", pp " + std::to_string(l.pp) + ", dp " + std::to_string(l.dp) +
                                      (l.cp > 1 ? ", cp " + std::to_string(l.cp) : std::string()) +
                                      (o.zero_stage >= 1 ? ", ZeRO-" + std::to_string(o.zero_stage) : std::string()) + ")",
                   s.device);
    }
    try {
      status = train_exit_status(trainer.run([] { return g_stop_signal != 0; }), trainer, s.rank() == 0);
    } catch (const TrainingStopped& e) {  // decided on every rank alike
      if (s.rank() == 0) std::cerr << "olmo2: error: " << e.what() << std::endl;
      throw SilentExit{};
    }
    if (distributed && status != kExitFinished) {  // alike on every rank
      exit_at_us = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count() + kExitDelayUs;
      s.world()->broadcast(std::span<int64_t>(&exit_at_us, 1), 0);
    }
  });
  // The session ended with a barrier: every rank has let go of the run (checkpoint
  // written, groups freed) before any ends.
  if (!distributed || status == kExitFinished) return status;
  // Open MPI's mpirun answers the first non-zero exit by signalling the ranks still
  // running: SIGCONT, SIGTERM and, measured here, SIGKILL within a few milliseconds. A
  // rank a little behind its peers in MPI_Finalize would end killed, not with `status`
  // (3 of 15 runs of tp 2 × pp 2 lost one rank so). So every rank finalizes, then exits
  // at the moment rank 0 set (0 of 15 lost one); the stop handlers stay installed, so a
  // SIGTERM changes nothing (docs/architecture.md §12 "Exit status").
  parallel::MpiRuntime::finalize_now();  // also when main's runtime initialised MPI
  std::cout.flush();
  std::cerr.flush();
  std::this_thread::sleep_until(std::chrono::system_clock::time_point(std::chrono::microseconds(exit_at_us)));
  std::_Exit(status);
}

}  // namespace olmo2
