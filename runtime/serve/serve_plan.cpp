#include "runtime/serve/serve_plan.h"

#include <bit>

#include "core/error.h"

namespace olmo2 {

int64_t StepPlan::sampled() const {
  int64_t n = 0;
  for (const auto& s : sequences) n += s.sample ? 1 : 0;
  return n;
}

std::vector<int64_t> encode_plan(const StepPlan& plan) {
  std::vector<int64_t> d = {plan.shutdown ? 1 : 0, plan.micro_batches, static_cast<int64_t>(plan.sequences.size())};
  for (const PlannedSequence& s : plan.sequences) {
    const SelectionRequest& r = s.selection;
    d.insert(d.end(), {s.seq_id, s.micro_batch, s.start, s.sample ? 1 : 0, std::bit_cast<int64_t>(r.params.temperature),
                       r.params.top_k, std::bit_cast<int64_t>(r.params.top_p), static_cast<int64_t>(r.params.seed),
                       static_cast<int64_t>(r.draw), r.logprobs, static_cast<int64_t>(s.tokens.size()),
                       static_cast<int64_t>(s.blocks.size())});
    d.insert(d.end(), s.tokens.begin(), s.tokens.end());
    d.insert(d.end(), s.blocks.begin(), s.blocks.end());
  }
  return d;
}

StepPlan decode_plan(std::span<const int64_t> d) {
  size_t at = 0;
  auto next = [&]() {
    OLMO2_CHECK(at < d.size(), "step plan truncated at ", at, " of ", d.size());
    return d[at++];
  };
  StepPlan p;
  p.shutdown = next() != 0;
  p.micro_batches = static_cast<int32_t>(next());
  const int64_t n = next();
  OLMO2_CHECK(n >= 0 && p.micro_batches >= 1, "malformed step plan: ", n, " sequences, ", p.micro_batches,
              " micro-batches");
  for (int64_t i = 0; i < n; ++i) {
    PlannedSequence s;
    s.seq_id = next();
    s.micro_batch = static_cast<int32_t>(next());
    s.start = next();
    s.sample = next() != 0;
    s.selection.params.temperature = std::bit_cast<double>(next());
    s.selection.params.top_k = next();
    s.selection.params.top_p = std::bit_cast<double>(next());
    s.selection.params.seed = static_cast<uint64_t>(next());
    s.selection.draw = static_cast<uint64_t>(next());
    s.selection.logprobs = static_cast<int32_t>(next());
    const int64_t nt = next(), nb = next();
    OLMO2_CHECK(nt >= 1 && nb >= 1 && s.micro_batch >= 0 && s.micro_batch < p.micro_batches,
                "malformed step plan entry ", i);
    for (int64_t t = 0; t < nt; ++t) s.tokens.push_back(static_cast<int32_t>(next()));
    for (int64_t b = 0; b < nb; ++b) s.blocks.push_back(static_cast<int32_t>(next()));
    p.sequences.push_back(std::move(s));
  }
  OLMO2_CHECK(at == d.size(), "step plan has ", d.size() - at, " trailing values");
  return p;
}

int64_t results_size(const StepPlan& plan) {
  int64_t n = 0;
  for (const auto& s : plan.sequences) n += s.sample ? 1 + s.selection.logprobs : 0;
  return n;
}

StepResults encode_results(const StepPlan& plan, const std::vector<SelectedToken>& tokens) {
  StepResults d;
  size_t k = 0;
  for (const auto& s : plan.sequences) {
    if (!s.sample) continue;
    OLMO2_CHECK(k < tokens.size(), "fewer chosen tokens than sampled sequences");
    const SelectedToken& t = tokens[k++];
    d.ids.push_back(t.id);
    d.logprobs.push_back(t.logprob);
    for (int32_t j = 0; j < s.selection.logprobs; ++j) {
      const bool have = j < static_cast<int32_t>(t.top.size());
      d.ids.push_back(have ? t.top[static_cast<size_t>(j)].id : -1);
      d.logprobs.push_back(have ? t.top[static_cast<size_t>(j)].logit : 0.0f);
    }
  }
  return d;
}

std::vector<SelectedToken> decode_results(const StepPlan& plan, std::span<const int32_t> ids,
                                          std::span<const float> logprobs) {
  const int64_t want = results_size(plan);
  OLMO2_CHECK(static_cast<int64_t>(ids.size()) == want && static_cast<int64_t>(logprobs.size()) == want,
              "step results of ", ids.size(), " ids and ", logprobs.size(), " log-probabilities, expected ",
              want, " of each");
  std::vector<SelectedToken> out;
  size_t at = 0;
  for (const auto& s : plan.sequences) {
    if (!s.sample) continue;
    SelectedToken t;
    t.id = ids[at];
    t.logprob = logprobs[at++];
    for (int32_t j = 0; j < s.selection.logprobs; ++j, ++at) {
      if (ids[at] >= 0) t.top.push_back({logprobs[at], ids[at]});
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace olmo2
