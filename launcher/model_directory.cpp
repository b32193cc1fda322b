#include "launcher/model_directory.h"

#include <filesystem>

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
  const Tokenizer tok = Tokenizer::from_file(reading.tokenizer);
  const std::string config_path =
      (std::filesystem::path(reading.tokenizer).parent_path() / "tokenizer_config.json").string();
  const TokenizerRoles roles = tokenizer_roles(tok, config_path);
  std::vector<std::string> found = special_token_mismatches(
      {"config.json", config.eos_token_ids, config.pad_token_id, config.bos_token_id, true}, tok, roles);
  if (f.generation) {
    const GenerationConfig& g = *f.generation;
    for (std::string& m : special_token_mismatches(
             {"generation_config.json", g.eos_token_ids, g.pad_token_id, g.bos_token_id, false}, tok, roles)) {
      found.push_back(std::move(m));
    }
  }
  if (found.empty()) return f;
  if (reading.strict_special_tokens) {
    std::string all;
    for (const std::string& m : found) all += (all.empty() ? "" : "; ") + m;
    OLMO2_THROW(InputError, model, ": ", all, " (--strict-special-tokens)");
  }
  f.warnings = std::move(found);
  return f;
}

std::string describe_generation_source(const ModelConfig& config, const ModelDirectoryReading& reading,
                                       const ModelDirectoryFindings& findings) {
  std::string ids;
  for (int64_t id : config.stop_token_ids()) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  std::string out = "stop ids " + (ids.empty() ? std::string("none") : ids);
  out += config.generation_eos_token_ids.empty() ? " (config.json)" : " (config.json, generation_config.json)";
  if (!reading.generation_config) return out + "; generation_config.json ignored (--generation-config ignore)";
  if (!findings.generation) return out + "; no generation_config.json";
  return out + "; defaults from generation_config.json: " + findings.generation->defaults.describe();
}

}  // namespace olmo2
