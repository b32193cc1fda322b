#include "runtime/serve/stop_strings.h"

#include <algorithm>

#include "core/error.h"

namespace olmo2 {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  for (size_t i = 0; i < stops_.size(); ++i) {
    if (stops_[i].empty()) OLMO2_THROW(InputError, "stop string ", i, " is empty");
    longest_ = std::max(longest_, stops_[i].size());
  }
}

std::string StopStringMatcher::push(std::string_view text, bool may_stop) {
  if (stopped_) return "";
  // buffer = [sent_: released already][held_][text]; a match must end inside `text`.
  const size_t released = sent_.size(), old = sent_.size() + held_.size();
  std::string buffer = sent_ + held_;
  buffer.append(text);
  held_.clear();
  if (may_stop && !text.empty()) {
    // The earliest occurrence of any stop string that ends in the new text ends it.
    size_t first = std::string::npos, end = 0;
    for (const std::string& s : stops_) {
      const size_t at = buffer.find(s, old >= s.size() ? old - s.size() + 1 : 0);
      if (at < first) first = at, end = at + s.size();
    }
    if (first != std::string::npos) {
      stopped_ = true;
      const size_t cut = include_stop_ ? end : first;
      return cut > released ? buffer.substr(released, cut - released) : std::string();
    }
  }
  if (include_stop_) {  // nothing held: keep the tail a later match may start in
    std::string out = buffer.substr(released);
    sent_ = buffer.substr(buffer.size() - std::min(buffer.size(), longest_ - 1));
    return out;
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
