// olmo2: one binary, subcommands (DESIGN §8). Every error ends here as one line on
// stderr and a non-zero exit: 2 for a bad command line, 1 for anything else.
#include <iostream>

#include "launcher/commands.h"
#include "launcher/options.h"

int main(int argc, char** argv) {
  using namespace olmo2;
  try {
    const CliConfig cfg = parse_command_line(argc, argv);
    if (cfg.help) {
      std::cout << cfg.help_text;
      return 0;
    }
    if (cfg.command == "info") run_info(cfg, std::cout);
    else if (cfg.command == "generate") run_generate(cfg, std::cout);
    else if (cfg.command == "tokenize") run_tokenize(cfg, std::cin, std::cout, std::cerr);
    return 0;
  } catch (const UsageError& e) {
    std::cerr << "olmo2: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "olmo2: error: " << e.what() << "\n";
    return 1;
  }
}
