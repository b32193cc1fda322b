// Command line → one validated configuration (Boost.Program_options, docs/architecture.md §12).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "launcher/device_options.h"
#include "launcher/job_options.h"
#include "launcher/layout_options.h"
#include "launcher/model_directory.h"
#include "launcher/plan_command.h"
#include "launcher/serve_options.h"
#include "launcher/trace_options.h"
#include "runtime/generation/sampling.h"
#include "runtime/model/precision.h"
#include "runtime/model/quantized_weights.h"
#include "runtime/train/trainer.h"

namespace olmo2 {

/// A malformed command line: unknown option, missing or bad value. Exit status 2.
class UsageError : public InputError {
 public:
  using InputError::InputError;
};

/// Everything a subcommand needs, parsed and validated once.
struct CliConfig {
  std::string command;              ///< "info", "plan", "generate", "trace", "train", "serve", "tokenize"
  bool help = false;                ///< --help: `help_text` holds the usage
  std::string help_text;
  std::string model;                ///< --model DIR
  std::vector<int32_t> prompt_ids;  ///< --prompt-ids 1,2,3
  std::string prompt;               ///< --prompt TEXT (generate: encoded with `tokenizer`)
  TrainOptions train;               ///< train: every option
  PlanRequest plan;                 ///< plan: every option but the layout's (in plan.options.layout)
  ServeOptions serve;               ///< serve: every option
  TraceOptions trace;               ///< generate, trace: named activations (docs/architecture.md §13)
  SamplingParams sampling;          ///< generate: --temperature --top-k --top-p --seed
  int64_t max_tokens = 16;          ///< --max-tokens N
  std::optional<Precision> precision;  ///< generate: --precision (unset: the checkpoint's, default_precision)
  std::optional<DType> kv_cache_dtype;  ///< generate: --kv-cache-dtype (unset: auto, kv_cache_dtype)
  std::string format = "text";      ///< --format text|json
  int threads = 0;                  ///< --threads N (0: the placement rule, docs/architecture.md §7 "Placement")
  std::string tokenizer;            ///< --tokenizer FILE (tokenizer.json; generate, trace: default MODEL/tokenizer.json)
  std::string output;               ///< --output DIR
  std::vector<std::string> inputs;  ///< positional input files
  bool ids_mode = false;            ///< --ids: stdin text → JSON ids on stdout
  /// tokenize: --eos-id N, the id appended after every document (unset: the tokenizer's
  /// end-of-text token, runtime/tokenizer/special_tokens.h)
  std::optional<int64_t> eos_id;
  /// tokenize: --allow-eos-mismatch, append an --eos-id other than the tokenizer's EOS,
  /// or another than the output directory's tokenize.json records (a warning, not an error)
  bool allow_eos_mismatch = false;
  /// info, generate, trace, train, serve: --tp --pp --dp --pp-layers --collective-timeout
  /// (info: with any of the first four, print the plan: `layout.given`)
  LayoutOptions layout;
  /// train, generate, serve: --device, --share-gpu (train: device also in train.device)
  DeviceOptions device_options;
  /// generate, trace, serve: --weights, --weight-group (nullopt: dense weights)
  std::optional<WeightQuantization> weights;
  /// generate, trace, serve: --generation-config, --strict-special-tokens and the
  /// tokenizer file their checks use
  ModelDirectoryReading directory;
  /// generate: which of --temperature --top-k --top-p --max-tokens --repetition-penalty
  /// were given (generation_config.json's defaults fill the others)
  struct Given {
    bool temperature = false, top_k = false, top_p = false, max_tokens = false, repetition_penalty = false;
  } given;
  double repetition_penalty = 1.0;  ///< generate: --repetition-penalty
  /// What every rank of an MPI job must share (launcher/job_options.h), for the agreement
  /// every rank makes before any work (launcher/job_agreement.h).
  std::vector<JobOption> job_options;
};

/// Parses `olmo2 SUBCOMMAND [options]`; options may also come from an INI file given
/// by --config FILE (the command line wins). Throws UsageError naming the offending
/// option or value: unknown subcommand or option, missing value, a number that does
/// not parse or is out of range, a malformed id list, a missing required option.
CliConfig parse_command_line(int argc, const char* const* argv);

/// Parses "8,8,7,7" into layers per pipeline stage; throws UsageError naming the element
/// that is not a positive 64-bit integer (empty elements included). Sums are the plan's
/// business (parallel::make_partition_plan).
std::vector<int64_t> parse_layer_list(const std::string& text, const std::string& option);

/// Parses "1,2,3" into ids; throws UsageError naming the element that is not a
/// non-negative 32-bit integer (empty elements included).
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& option);

}  // namespace olmo2
