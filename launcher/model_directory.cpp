#include "launcher/model_directory.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "launcher/options.h"
#include "runtime/tokenizer/special_tokens.h"
#include "runtime/tokenizer/tokenizer.h"

namespace olmo2 {

namespace po = boost::program_options;

void add_model_directory_options(po::options_description& d) {
  d.add_options()("generation-config", po::value<std::string>(),
                  "auto (default): the model directory's generation_config.json adds its eos ids to the stop ids "
                  "and sets the default sampling values; ignore: config.json's eos ids only, built-in defaults")(
      "strict-special-tokens", po::bool_switch(),
      "refuse a model whose config.json / generation_config.json special ids disagree with the tokenizer "
      "(default: a warning)");
}

ModelDirectoryReading read_model_directory_options(const po::variables_map& vm, const std::string& tokenizer) {
  ModelDirectoryReading r;
  if (vm.count("generation-config")) {
    const std::string v = vm["generation-config"].as<std::string>();
    if (v != "auto" && v != "ignore") {
      OLMO2_THROW(UsageError, "--generation-config must be auto or ignore, got \"", v, "\"");
    }
    r.generation_config = v == "auto";
  }
  r.strict_special_tokens = vm.count("strict-special-tokens") && vm["strict-special-tokens"].as<bool>();
  r.tokenizer = tokenizer;
  return r;
}

ModelDirectoryFindings read_model_directory(const std::string& model, ModelConfig& config,
                                            const ModelDirectoryReading& reading) {
  ModelDirectoryFindings f;
  if (reading.generation_config) f.generation = read_generation_config(model, config.vocab_size);
  if (f.generation) config.add_generation_eos_token_ids(f.generation->eos_token_ids);
  if (!std::filesystem::is_regular_file(reading.tokenizer)) {
    if (reading.strict_special_tokens) {
      OLMO2_THROW(InputError, "--strict-special-tokens: no tokenizer to check the special ids against (no file ",
                  reading.tokenizer, ")");
    }
    return f;
  }
  std::optional<Tokenizer> tok;
  TokenizerRoles roles;
  try {
    tok = Tokenizer::from_file(reading.tokenizer);
    roles = tokenizer_roles(*tok, (std::filesystem::path(reading.tokenizer).parent_path() / "tokenizer_config.json").string());
  } catch (const InputError& e) {  // generate --prompt-ids needs no tokenizer: fatal only when asked to check
    if (reading.strict_special_tokens) throw;
    f.warnings.push_back(std::string("the special ids are not checked: ") + e.what());
    return f;
  }
  std::vector<std::string> found = special_token_mismatches(
      {"config.json", config.eos_token_ids, config.pad_token_id, config.bos_token_id, true}, *tok, roles);
  if (f.generation) {
    const GenerationConfig& g = *f.generation;
    for (std::string& m : special_token_mismatches(
             {"generation_config.json", g.eos_token_ids, g.pad_token_id, g.bos_token_id, false}, *tok, roles)) {
      found.push_back(std::move(m));
    }
  }
  if (found.empty()) return f;
  // A file of thousands of stray ids says so in a few lines, not thousands.
  constexpr size_t kShown = 8;
  if (found.size() > kShown) {
    const size_t more = found.size() - kShown;
    found.resize(kShown);
    found.push_back("… and " + std::to_string(more) + " more mismatches of the same files");
  }
  if (reading.strict_special_tokens) {
    std::string all;
    for (const std::string& m : found) all += (all.empty() ? "" : "; ") + m;
    OLMO2_THROW(InputError, model, ": ", all, " (--strict-special-tokens)");
  }
  f.warnings = std::move(found);
  return f;
}

std::string describe_generation_source(const ModelConfig& config, const ModelDirectoryReading& reading,
                                       const ModelDirectoryFindings& findings, bool transformers_rules) {
  const std::vector<int64_t> stop = config.stop_token_ids();
  constexpr size_t kShown = 16;
  std::string ids;
  for (size_t i = 0; i < std::min(stop.size(), kShown); ++i) ids += (ids.empty() ? "" : ", ") + std::to_string(stop[i]);
  if (stop.size() > kShown) ids += ", … (" + std::to_string(stop.size()) + " in all)";
  std::string out = "stop ids " + (ids.empty() ? std::string("none") : ids);
  out += config.generation_eos_token_ids.empty() ? " (config.json)" : " (config.json, generation_config.json)";
  if (!reading.generation_config) return out + "; generation_config.json ignored (--generation-config ignore)";
  if (!findings.generation) return out + "; no generation_config.json";
  GenerationDefaults d = findings.generation->defaults;
  if (!transformers_rules) d.do_sample.reset();  // vLLM's rules ignore it: not a default there
  out += "; defaults from generation_config.json: " + d.describe();
  if (transformers_rules && !d.do_sample.value_or(false) && (d.temperature || d.top_k || d.top_p || d.min_p)) {
    out += " (temperature, top_k, top_p and min_p unused: do_sample is not true)";
  }
  return out;
}

}  // namespace olmo2
