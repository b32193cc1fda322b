// Subcommands of the olmo2 binary.
#pragma once

#include <istream>
#include <ostream>

#include "launcher/options.h"
#include "parallel/partition.h"
#include "runtime/config.h"

namespace olmo2 {

/// `olmo2 info`: the configuration and parameter count, from config.json alone; with
/// --tp/--pp/--dp/--pp-layers also the partition plan per rank (parallel::describe).
/// Throws InputError for a bad config.json or a layout the model cannot be split into.
void run_info(const CliConfig& cfg, std::ostream& out);

/// The sizes of `c` the partition plan needs.
parallel::ModelShape model_shape(const ModelConfig& c);

/// `olmo2 generate`: loads the model and prints greedy output ids (text or JSON).
void run_generate(const CliConfig& cfg, std::ostream& out);

/// `olmo2 tokenize`: documents → .npy token files (progress on a terminal, summary
/// always, on `err`), or with --ids stdin text → a JSON array of ids on `out`.
void run_tokenize(const CliConfig& cfg, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace olmo2
