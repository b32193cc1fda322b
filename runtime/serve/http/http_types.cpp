#include "runtime/serve/http/http_types.h"

namespace olmo2::http {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

const std::string* Headers::find(std::string_view name) const {
  for (const auto& [n, v] : fields_) {
    if (iequals(n, name)) return &v;
  }
  return nullptr;
}

std::string Headers::get(std::string_view name) const {
  const std::string* v = find(name);
  return v ? *v : std::string();
}

}  // namespace olmo2::http
