#include "runtime/serve/memory_size.h"

#include <cctype>
#include <cmath>
#include <exception>

#include "core/error.h"

namespace olmo2 {

int64_t parse_memory_size(const std::string& text, const std::string& what) {
  // The number: decimal digits with an optional fraction, nothing else (no sign, no
  // exponent, no hexadecimal: "0x10GB" or "1e3GB" are typing mistakes, not sizes).
  size_t used = 0;
  while (used < text.size() && std::isdigit(static_cast<unsigned char>(text[used]))) ++used;
  const size_t whole = used;
  if (used < text.size() && text[used] == '.') {
    ++used;
    while (used < text.size() && std::isdigit(static_cast<unsigned char>(text[used]))) ++used;
  }
  if (whole == 0 || text[used - 1] == '.') {
    OLMO2_THROW(InputError, what, ": '", text, "' is not a size (a decimal number and a unit, e.g. 512MiB, 2GiB, 1.5GB)");
  }
  if (used + 1 < text.size() && (text[used] == 'e' || text[used] == 'E') &&
      (std::isdigit(static_cast<unsigned char>(text[used + 1])) || text[used + 1] == '-' || text[used + 1] == '+')) {
    OLMO2_THROW(InputError, what, ": '", text, "' has an exponent; write the size with a unit (e.g. 80GB, 512MiB)");
  }
  const double value = std::stod(text.substr(0, used));
  // The unit, in any letter case: powers of 1000 (K, M, G, T, optionally with B) or of
  // 1024 (KiB, MiB, GiB, TiB); none or B for bytes.
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const std::pair<const char*, double> units[] = {
      {"", 1},         {"B", 1},        {"K", 1e3},  {"KB", 1e3},  {"M", 1e6},   {"MB", 1e6},
      {"G", 1e9},      {"GB", 1e9},     {"T", 1e12}, {"TB", 1e12}, {"KIB", 1024.0}, {"MIB", 1048576.0},
      {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  double scale = 0;
  for (const auto& [name, factor] : units) {
    if (unit == name) scale = factor;
  }
  if (scale == 0) {
    OLMO2_THROW(InputError, what, ": unknown unit '", text.substr(used), "' in '", text,
                "' (B; KB, MB, GB, TB or K, M, G, T: powers of 1000; KiB, MiB, GiB, TiB: powers of 1024)");
  }
  const double bytes = value * scale;
  if (!(bytes >= 1)) OLMO2_THROW(InputError, what, " must be a positive size, got '", text, "'");
  if (!std::isfinite(bytes) || bytes > 9e18) {
    OLMO2_THROW(InputError, what, " must be at most 9e18 bytes, got '", text, "'");
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace olmo2
