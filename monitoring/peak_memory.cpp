#include "monitoring/peak_memory.h"

#include <fstream>
#include <iterator>
#include <sstream>

namespace olmo2::monitoring {

int64_t parse_vm_hwm(const std::string& text) {
  const std::string key = "VmHWM:";
  size_t at = text.rfind("\n" + key);
  if (at != std::string::npos) ++at;
  else if (text.compare(0, key.size(), key) == 0) at = 0;
  else return 0;
  std::istringstream in(text.substr(at + key.size(), text.find('\n', at) - at - key.size()));
  int64_t kb = -1;
  std::string unit;
  if (!(in >> kb >> unit) || kb < 0 || unit != "kB") return 0;
  return kb * 1024;
}

int64_t peak_resident_bytes() {
  std::ifstream in("/proc/self/status");
  if (!in) return 0;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_vm_hwm(text);
}

}  // namespace olmo2::monitoring
