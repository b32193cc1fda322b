// Reading the Prometheus text format in tests.
#pragma once

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

namespace olmo2::test {

/// "name{labels}" → value, from the Prometheus text format.
inline std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

}  // namespace olmo2::test
