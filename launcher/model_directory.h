// `--generation-config auto|ignore` and `--strict-special-tokens` of generate, trace and
// serve: a model directory read the way transformers and vLLM read it — the stop ids and
// sampling defaults of its generation_config.json, and its special ids checked against
// the tokenizer (docs/architecture.md §8, "Stop ids and sampling defaults"; guides:
// docs/guides/serving.md, docs/guides/generation.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "runtime/generation/generation_config.h"
#include "runtime/model/config.h"

namespace olmo2 {

/// How a command reads its model directory beyond config.json.
struct ModelDirectoryReading {
  bool generation_config = true;       ///< --generation-config auto (false: ignore)
  bool strict_special_tokens = false;  ///< --strict-special-tokens: mismatches are errors
  /// The tokenizer.json the command uses (its directory's tokenizer_config.json names
  /// the roles, tokenizer_roles); a path that is no file: nothing to check against.
  std::string tokenizer;
};

/// What reading the directory found.
struct ModelDirectoryFindings {
  std::optional<GenerationConfig> generation;  ///< nullopt: no file, or --generation-config ignore
  std::vector<std::string> warnings;           ///< special-id mismatches (empty under strict: they threw)
};

/// Adds --generation-config and --strict-special-tokens (job options: every rank of a
/// job must be given the same).
void add_model_directory_options(boost::program_options::options_description& d);

/// Reads them; `tokenizer` is the file the command uses. Throws UsageError naming the
/// value for a --generation-config other than auto and ignore.
ModelDirectoryReading read_model_directory_options(const boost::program_options::variables_map& vm,
                                                   const std::string& tokenizer);

/// Reads `model`/generation_config.json (unless reading.generation_config is false) into
/// the result, adds its eos ids to `config`'s stop ids (add_generation_eos_token_ids),
/// and checks config.json's and generation_config.json's special ids against the
/// tokenizer (special_token_mismatches; at most 8 named, then their count). Every rank of
/// a job calls it alike. Throws InputError as read_generation_config, and under
/// strict_special_tokens for any mismatch (in one message), when reading.tokenizer is no
/// file, or when it or its tokenizer_config.json cannot be read (without the flag: a
/// warning that the ids are not checked).
ModelDirectoryFindings read_model_directory(const std::string& model, ModelConfig& config,
                                            const ModelDirectoryReading& reading);

/// The line a command prints at start about where its stop ids and defaults come from:
/// "stop ids 100257, 100265 (config.json, generation_config.json); defaults from
/// generation_config.json: temperature 0.6, top_p 0.9" / "…; no generation_config.json"
/// / "…; generation_config.json ignored (--generation-config ignore)" (at most 16 ids
/// named). `transformers_rules` (generate): says when the sampling values go unused
/// because do_sample is not true.
std::string describe_generation_source(const ModelConfig& config, const ModelDirectoryReading& reading,
                                       const ModelDirectoryFindings& findings, bool transformers_rules = false);

}  // namespace olmo2
