// Subcommands of the olmo2 binary.
#pragma once

#include <ostream>

#include "launcher/options.h"

namespace olmo2 {

/// `olmo2 info`: the configuration and parameter count, from config.json alone.
void run_info(const CliConfig& cfg, std::ostream& out);

/// `olmo2 generate`: loads the model and prints greedy output ids (text or JSON).
void run_generate(const CliConfig& cfg, std::ostream& out);

}  // namespace olmo2
