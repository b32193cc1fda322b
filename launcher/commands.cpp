#include "launcher/commands.h"

#include <nlohmann/json.hpp>

#include "ops/threads.h"
#include "runtime/config.h"
#include "runtime/generate.h"
#include "runtime/model.h"

namespace olmo2 {

void run_info(const CliConfig& cfg, std::ostream& out) {
  const ModelConfig c = ModelConfig::load(cfg.model);
  out << "model " << cfg.model << "\n" << c.summary();
  const double gib = static_cast<double>(c.parameter_count()) * dtype_size(c.dtype) / (1u << 30);
  out << "weight bytes            " << c.parameter_count() * static_cast<int64_t>(dtype_size(c.dtype))
      << " (" << gib << " GiB as " << dtype_name(c.dtype) << ")\n";
}

void run_generate(const CliConfig& cfg, std::ostream& out) {
  if (cfg.threads > 0) set_num_threads(cfg.threads);
  const Olmo2Model model = Olmo2Model::load(cfg.model);
  const GenerateResult r = generate_greedy(model, cfg.prompt_ids, cfg.max_tokens);
  if (cfg.format == "json") {
    nlohmann::json j = {{"prompt_ids", cfg.prompt_ids},
                        {"output_ids", r.output_ids},
                        {"finish_reason", r.finish_reason}};
    out << j.dump() << "\n";
  } else {
    out << "output_ids:";
    for (size_t i = 0; i < r.output_ids.size(); ++i) out << (i ? "," : " ") << r.output_ids[i];
    out << "\nfinish_reason: " << r.finish_reason << "\n";
  }
}

}  // namespace olmo2
