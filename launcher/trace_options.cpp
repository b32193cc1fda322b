#include "launcher/trace_options.h"

#include "launcher/options.h"

namespace olmo2 {

namespace po = boost::program_options;

trace::TraceSpec TraceOptions::spec(const ModelConfig& config) const {
  return trace::parse_trace_request(activations ? &*activations : nullptr, interventions ? &*interventions : nullptr,
                                    config);
}

void add_trace_options(po::options_description& d, const std::string& command) {
  if (command == "trace") {
    d.add_options()("prompts", po::value<std::string>(),
                    "JSON Lines file, each line {\"prompt\": TEXT} or {\"prompt_ids\": [ids]}")(
        "output", po::value<std::string>(), "JSON Lines output file (default: standard output)");
  }
  d.add_options()("activations", po::value<std::string>(),
                  "named activations to read, a JSON list as the API's `activations`, e.g. "
                  "'[\"layers.*.layer_output\", {\"name\": \"logits\", \"reduce\": \"norm\"}]'")(
      "interventions", po::value<std::string>(),
      "changes to the forward, a JSON list as the API's `interventions` (steering vectors, head ablation)");
  if (command == "generate") {
    d.add_options()("activations-out", po::value<std::string>(),
                    "write the reads as one JSON object to this file (default: with the generated output)");
  }
}

namespace {
/// The JSON text of option `name`, parsed; throws UsageError naming it.
nlohmann::json json_option(const po::variables_map& vm, const char* name) {
  const std::string& text = vm[name].as<std::string>();
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    OLMO2_THROW(UsageError, "--", name, ": not JSON (", e.what(), "): ", text);
  }
}
}  // namespace

TraceOptions read_trace_options(const po::variables_map& vm, const std::string& command) {
  TraceOptions o;
  if (vm.count("activations")) o.activations = json_option(vm, "activations");
  if (vm.count("interventions")) o.interventions = json_option(vm, "interventions");
  if (command == "generate" && vm.count("activations-out")) {
    o.activations_out = vm["activations-out"].as<std::string>();
    if (!o.activations) OLMO2_THROW(UsageError, "generate: --activations-out needs --activations");
    if (o.activations_out.empty()) OLMO2_THROW(UsageError, "generate: --activations-out is empty");
  }
  if (command == "trace") {
    if (!vm.count("prompts")) OLMO2_THROW(UsageError, "trace: --prompts FILE is required");
    if (!o.activations) OLMO2_THROW(UsageError, "trace: --activations JSON is required");
    o.prompts = vm["prompts"].as<std::string>();
    if (vm.count("output")) o.output = vm["output"].as<std::string>();
  }
  return o;
}

}  // namespace olmo2
