// olmo2: one binary, subcommands (DESIGN §8). Every error ends here as one line on
// stderr and a non-zero exit: 2 for a bad command line, 1 for anything else.
#include <iostream>

#include "launcher/commands.h"
#include "launcher/options.h"

namespace {
/// Flushes stdout; a full disk or a closed pipe must not look like success.
int finish_output() {
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "olmo2: error: cannot write to standard output\n";
    return 1;
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace olmo2;
  try {
    const CliConfig cfg = parse_command_line(argc, argv);
    if (cfg.help) {
      std::cout << cfg.help_text;
      return finish_output();
    }
    if (cfg.command == "info") run_info(cfg, std::cout);
    else if (cfg.command == "generate") run_generate(cfg, std::cout);
    else if (cfg.command == "tokenize") run_tokenize(cfg, std::cin, std::cout, std::cerr);
    return finish_output();
  } catch (const UsageError& e) {
    std::cerr << "olmo2: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "olmo2: error: " << e.what() << "\n";
    return 1;
  }
}
