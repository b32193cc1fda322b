// Subcommands of the olmo2 binary.
#pragma once

#include <istream>
#include <ostream>

#include "launcher/options.h"

namespace olmo2 {

/// `olmo2 info`: the configuration and parameter count, from config.json alone.
void run_info(const CliConfig& cfg, std::ostream& out);

/// `olmo2 generate`: loads the model and prints greedy output ids (text or JSON).
void run_generate(const CliConfig& cfg, std::ostream& out);

/// `olmo2 tokenize`: documents → .npy token files (progress on a terminal, summary
/// always, on `err`), or with --ids stdin text → a JSON array of ids on `out`.
void run_tokenize(const CliConfig& cfg, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace olmo2
