#include "runtime/serve/stop_strings.h"

#include <algorithm>

#include "core/error.h"

namespace olmo2 {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) OLMO2_THROW(InputError, "stop string ", i, " is empty");
  }
}

std::string StopStringMatcher::push(std::string_view text) {
  if (stopped_) return "";
  std::string buffer = held_;
  buffer.append(text);
  held_.clear();
  // The earliest occurrence of any stop string ends the text.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, buffer.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    return buffer.substr(0, first);
  }
  // Hold the longest tail that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, buffer.size()); n > hold; --n) {
      if (buffer.compare(buffer.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  held_ = buffer.substr(buffer.size() - hold);
  buffer.resize(buffer.size() - hold);
  return buffer;
}

std::string StopStringMatcher::flush() {
  if (stopped_) return "";
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace olmo2
