// Shared pieces of olmo2_load_gen (bench/README.md, "Serving load") that do not touch the
// network: the server-sent-events splitter, the per-request record, the nearest-rank
// percentile and the summary. The options, the HTTP client and main() are in
// olmo2_load_gen.cpp, the summary in load_gen_report.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace olmo2::bench {

/// Splits a text/event-stream byte stream into events. Bytes arrive in arbitrary pieces:
/// an event may be split over several feed() calls and one call may hold several events.
/// Lines end in "\n" or "\r\n"; a blank line ends an event; the "data:" lines of an event
/// (one leading space removed) are joined with "\n" and handed to the callback. Comment
/// lines (":...") and other fields (event:, id:, retry:) are ignored.
class SseSplitter {
 public:
  /// `on_event(data)` is called once per complete event that has data; returning false
  /// stops feed() and makes it return false.
  explicit SseSplitter(std::function<bool(const std::string&)> on_event)
      : on_event_(std::move(on_event)) {}

  /// Consumes `n` bytes; false when the callback asked to stop.
  bool feed(const char* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (p[i] != '\n') {
        line_.push_back(p[i]);
        continue;
      }
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (!end_line()) return false;
      line_.clear();
    }
    return true;
  }

  /// True when bytes of an unfinished event are buffered (a stream that ends here was cut).
  bool pending() const { return !line_.empty() || has_data_; }

 private:
  bool end_line() {
    if (line_.empty()) {  // blank line: dispatch
      if (!has_data_) return true;
      has_data_ = false;
      std::string data = std::move(data_);
      data_.clear();
      return on_event_(data);
    }
    if (line_.compare(0, 5, "data:") != 0) return true;
    std::size_t from = line_.size() > 5 && line_[5] == ' ' ? 6 : 5;
    if (has_data_) data_.push_back('\n');
    data_.append(line_, from, std::string::npos);
    has_data_ = true;
    return true;
  }

  std::function<bool(const std::string&)> on_event_;
  std::string line_, data_;
  bool has_data_ = false;
};

using LoadClock = std::chrono::steady_clock;

/// What one completion request measured. Times are seconds from the moment it was sent.
struct RequestRecord {
  bool ok = false;
  std::string failure_kind;        // when !ok: "HTTP 503", "transport", "timeout", "stream"
  std::string error;               // when !ok: a one-line message
  int status = 0;                  // HTTP status, 0 when no response came
  double ttft = 0;                 // first event with text (or the first event if none has text)
  double e2e = 0;                  // until the stream ended
  std::vector<double> text_times;  // arrival of each event that carries text
  int64_t prompt_tokens = 0, completion_tokens = 0;  // from "usage"
  std::string finish_reason;
};

/// Nearest-rank percentile of `sorted` (ascending, non-empty): the element at rank
/// ceil(p/100 · n), 1-based, clamped to [1, n]. p in (0, 100].
inline double percentile(const std::vector<double>& sorted, double p) {
  const auto n = static_cast<double>(sorted.size());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * n));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

/// Arithmetic mean of `v` (0 when empty).
inline double mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

/// What the summary reports besides the records (the run's parameters).
struct RunInfo {
  std::string host, model;
  int port = 0;
  long long requests = 0, concurrency = 0, prompt_tokens = 0, max_tokens = 0, warmup = 0;
  long long seed = 0;
  bool ignore_eos = true;
  long long shared_prefix_tokens = 0;  ///< ids every prompt starts with, before its prompt_tokens
  std::string extra_body;  ///< --extra-body's JSON object as sent ("" when none)
};

/// Prints the summary of the timed `records` (wall = seconds of the timed phase) to stdout,
/// as a table or, with `as_json`, as one JSON object; the first failures' messages go to
/// stderr.
void print_summary(const RunInfo& info, const std::vector<RequestRecord>& records, double wall,
                   bool as_json);

}  // namespace olmo2::bench
