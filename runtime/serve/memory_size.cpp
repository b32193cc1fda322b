#include "runtime/serve/memory_size.h"

#include <cmath>
#include <exception>

#include "core/error.h"

namespace olmo2 {

int64_t parse_memory_size(const std::string& text, const std::string& what) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    OLMO2_THROW(InputError, what, ": '", text, "' is not a size (e.g. 512MiB, 2GiB, 1.5G)");
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB") scale = 1e3;
  else if (unit == "M" || unit == "MB") scale = 1e6;
  else if (unit == "G" || unit == "GB") scale = 1e9;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else OLMO2_THROW(InputError, what, ": unknown unit '", unit, "' in '", text, "' (B, K, M, G, KiB, MiB, GiB)");
  const double bytes = value * scale;
  if (!(bytes >= 1)) OLMO2_THROW(InputError, what, " must be a positive size, got '", text, "'");
  if (!std::isfinite(bytes) || bytes > 9e18) {
    OLMO2_THROW(InputError, what, " must be at most 9e18 bytes, got '", text, "'");
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace olmo2
