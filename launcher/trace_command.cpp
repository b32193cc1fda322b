// `olmo2 trace`: named activations of a file of prompts, without generation, on one
// process or every rank of an MPI job (docs/architecture.md §12, §13).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/commands.h"
#include "launcher/rank_session.h"
#include "launcher/trace_files.h"
#include "parallel/agreement.h"
#include "runtime/generation/trace_prompts.h"
#include "runtime/io/checkpoint_files.h"
#include "runtime/model/model.h"

namespace olmo2 {

namespace {
/// The line of prompt `index`: {"index", "prompt_ids", "activations"}.
void write_line(std::ostream& out, size_t index, const std::vector<int32_t>& ids, nlohmann::json activations) {
  const nlohmann::json line = {{"index", index}, {"prompt_ids", ids}, {"activations", std::move(activations)}};
  out << line.dump() << "\n";
  out.flush();
  if (!out) OLMO2_THROW(InputError, "cannot write the result of prompt ", index);
}
}  // namespace

void run_trace(const CliConfig& cfg, std::ostream& stdout_stream, bool under_mpi_launcher) {
  std::vector<std::vector<int32_t>> prompts;
  trace::TraceSpec spec;
  std::ofstream file;  // --output, written by world rank 0
  auto out = [&]() -> std::ostream& { return cfg.trace.output.empty() ? stdout_stream : file; };
  // Everything about the input, checked alike by every rank before any collective.
  RankSessionSpec session = rank_session_spec(cfg, under_mpi_launcher);
  session.model = cfg.model;
  session.checks = [&](const ModelConfig& c, const ModelDirectoryFindings&) {
    spec = cfg.trace.spec(c);
    prompts = read_trace_prompts(cfg.trace.prompts, cfg.tokenizer, c);
  };
  session.print_device = true;
  run_rank_session(session, [&](RankSession& s) {
    const int rank = s.rank();
    parallel::agree(s.world(), [&] {
      if (rank == 0 && !cfg.trace.output.empty()) file = open_output_file(cfg.trace.output, "--output");
      verify_model_directory(cfg.model, {rank, s.world_size()}, rank == 0 ? &std::cerr : nullptr);
    });
    const Olmo2Model model = Olmo2Model::load(cfg.model, s.shard, cfg.precision, s.device.device, cfg.weights);
    if (rank == 0 && model.quantization()) std::cerr << "weights: " << quantization_text(*model.quantization()) << std::endl;
    const TraceJob job{s.world(), s.coords().dp, s.topology.layout().dp};
    trace_prompts(model, prompts, spec, s.parallel_context(), job,
                  [&](size_t i, nlohmann::json a) { write_line(out(), i, prompts[i], std::move(a)); });
  });
}

}  // namespace olmo2
