// olmo2_load_gen's summary (bench/README.md, "Serving load"): the figures over the timed
// requests, as a table or as one JSON object.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/load_gen.h"

namespace olmo2::bench {
namespace {

/// Sorted samples with the percentiles the summary asks for; empty when no sample.
struct Samples {
  std::vector<double> v;
  std::optional<double> p(double q) const {
    if (v.empty()) return std::nullopt;
    return percentile(v, q);
  }
  std::optional<double> avg() const {
    if (v.empty()) return std::nullopt;
    return mean(v);
  }
  void sort() { std::sort(v.begin(), v.end()); }
};

nlohmann::json ms_json(std::optional<double> s) {
  return s ? nlohmann::json(*s * 1e3) : nlohmann::json(nullptr);
}

std::string ms_cell(std::optional<double> s) {
  char buf[32];
  if (!s) return "        -";
  std::snprintf(buf, sizeof buf, "%9.2f", *s * 1e3);
  return buf;
}

}  // namespace

void print_summary(const RunInfo& info, const std::vector<RequestRecord>& records, double wall,
                   bool as_json) {
  Samples ttft, itl, tpot, e2e;
  std::map<std::string, long long> failures;
  long long ok = 0, shorter = 0, out_tokens = 0, in_tokens = 0;
  for (const auto& r : records) {
    if (!r.ok) {
      ++failures[r.failure_kind];
      continue;
    }
    ++ok;
    out_tokens += r.completion_tokens;
    in_tokens += r.prompt_tokens;
    if (info.ignore_eos && r.completion_tokens != info.max_tokens) ++shorter;
    ttft.v.push_back(r.ttft);
    e2e.v.push_back(r.e2e);
    for (size_t i = 1; i < r.text_times.size(); ++i)
      itl.v.push_back(r.text_times[i] - r.text_times[i - 1]);
    if (r.completion_tokens > 1 && r.text_times.size() >= 2)
      tpot.v.push_back((r.text_times.back() - r.text_times.front()) /
                       static_cast<double>(r.completion_tokens - 1));
  }
  for (Samples* s : {&ttft, &itl, &tpot, &e2e}) s->sort();
  const long long failed = static_cast<long long>(records.size()) - ok;
  const double rps = ok / wall, out_tps = out_tokens / wall, in_tps = in_tokens / wall;

  if (as_json) {
    nlohmann::json j{
        {"host", info.host},
        {"port", info.port},
        {"model", info.model},
        {"requests", info.requests},
        {"concurrency", info.concurrency},
        {"prompt_tokens", info.prompt_tokens},
        {"shared_prefix_tokens", info.shared_prefix_tokens},
        {"max_tokens", info.max_tokens},
        {"ignore_eos", info.ignore_eos},
        {"warmup", info.warmup},
        {"seed", info.seed},
        {"ok", ok},
        {"failed", failed},
        {"failures", failures},
        {"short_completions", shorter},
        {"wall_s", wall},
        {"requests_per_s", rps},
        {"output_tokens_per_s", out_tps},
        {"input_tokens_per_s", in_tps},
        {"completion_tokens", out_tokens},
        {"ttft_ms",
         {{"p50", ms_json(ttft.p(50))},
          {"p90", ms_json(ttft.p(90))},
          {"p99", ms_json(ttft.p(99))},
          {"mean", ms_json(ttft.avg())}}},
        {"itl_ms",
         {{"p50", ms_json(itl.p(50))}, {"p90", ms_json(itl.p(90))}, {"p99", ms_json(itl.p(99))}}},
        {"tpot_ms", {{"p50", ms_json(tpot.p(50))}}},
        {"e2e_ms",
         {{"p50", ms_json(e2e.p(50))}, {"p99", ms_json(e2e.p(99))}, {"mean", ms_json(e2e.avg())}}}};
    if (!info.extra_body.empty()) j["extra_body"] = nlohmann::json::parse(info.extra_body);
    auto& errors = j["errors"] = nlohmann::json::array();
    for (size_t i = 0; i < records.size() && errors.size() < 5; ++i)
      if (!records[i].ok) errors.push_back({{"request", i}, {"error", records[i].error}});
    std::cout << j.dump() << std::endl;
  } else {
    std::string by_kind;
    for (const auto& [k, n] : failures)
      by_kind += (by_kind.empty() ? " (" : ", ") + k + ": " + std::to_string(n);
    if (!by_kind.empty()) by_kind += ")";
    std::printf("olmo2_load_gen  %s:%d  model %s\n", info.host.c_str(), info.port,
                info.model.c_str());
    std::printf(
        "  %lld requests (+%lld warm-up), concurrency %lld, prompt %lld shared + %lld tokens, "
        "max_tokens %lld, ignore_eos %s, seed %lld\n",
        info.requests, info.warmup, info.concurrency, info.shared_prefix_tokens, info.prompt_tokens,
        info.max_tokens, info.ignore_eos ? "on" : "off", info.seed);
    if (!info.extra_body.empty()) std::printf("  extra body %s\n", info.extra_body.c_str());
    std::printf("\n");
    std::printf("requests          %lld ok, %lld failed%s\n", ok, failed, by_kind.c_str());
    std::printf("wall time         %.3f s\n", wall);
    std::printf("requests/s        %.2f\n", rps);
    std::printf("output tokens/s   %.1f   (%lld completion tokens)\n", out_tps, out_tokens);
    std::printf("input tokens/s    %.1f\n\n", in_tps);
    std::printf("latency (ms)          p50       p90       p99      mean\n");
    std::printf("TTFT            %s %s %s %s\n", ms_cell(ttft.p(50)).c_str(),
                ms_cell(ttft.p(90)).c_str(), ms_cell(ttft.p(99)).c_str(),
                ms_cell(ttft.avg()).c_str());
    std::printf("ITL             %s %s %s %s\n", ms_cell(itl.p(50)).c_str(),
                ms_cell(itl.p(90)).c_str(), ms_cell(itl.p(99)).c_str(), ms_cell({}).c_str());
    std::printf("TPOT            %s %s %s %s\n", ms_cell(tpot.p(50)).c_str(), ms_cell({}).c_str(),
                ms_cell({}).c_str(), ms_cell({}).c_str());
    std::printf("E2E             %s %s %s %s\n", ms_cell(e2e.p(50)).c_str(), ms_cell({}).c_str(),
                ms_cell(e2e.p(99)).c_str(), ms_cell(e2e.avg()).c_str());
    std::fflush(stdout);
  }
  if (shorter > 0)
    std::cerr << "note: " << shorter
              << " ok requests generated other than max_tokens = " << info.max_tokens
              << " tokens despite ignore_eos\n";
  if (failed > 0) {
    std::cerr << failed << " of " << records.size() << " requests failed; the first:\n";
    int shown = 0;
    for (size_t i = 0; i < records.size() && shown < 5; ++i)
      if (!records[i].ok) {
        std::cerr << "  request " << i << ": " << records[i].error << "\n";
        ++shown;
      }
  }
}

}  // namespace olmo2::bench
