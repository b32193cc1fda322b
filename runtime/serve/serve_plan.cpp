#include "runtime/serve/serve_plan.h"

#include <bit>
#include <memory>

#include "core/error.h"

namespace olmo2 {

namespace {
int64_t float_bits(float f) { return std::bit_cast<int32_t>(f); }
float bits_float(int64_t b) { return std::bit_cast<float>(static_cast<int32_t>(b)); }

/// The allowed-token mask (see encode_plan): a word saying how (0 none, 1 the allowed
/// ids, 2 the bitmask's words), then the mask's word count, then the id count and the
/// ids, or the words — whichever is shorter.
enum AllowedForm : int64_t { kNoMask = 0, kAllowedIds = 1, kMaskWords = 2 };

void encode_allowed(const std::vector<uint64_t>* mask, std::vector<int64_t>& d) {
  if (!mask) {
    d.push_back(kNoMask);
    return;
  }
  int64_t ones = 0;
  for (const uint64_t w : *mask) ones += std::popcount(w);
  const int64_t words = static_cast<int64_t>(mask->size());
  if (ones + 1 < words) {
    d.insert(d.end(), {kAllowedIds, words, ones});
    for (int64_t w = 0; w < words; ++w) {
      for (uint64_t bits = (*mask)[static_cast<size_t>(w)]; bits; bits &= bits - 1) {
        d.push_back(w * 64 + std::countr_zero(bits));
      }
    }
  } else {
    d.insert(d.end(), {kMaskWords, words});
    for (const uint64_t w : *mask) d.push_back(std::bit_cast<int64_t>(w));
  }
}

/// The selection part of a sequence's entry (see encode_plan).
void encode_selection(const SelectionRequest& r, std::vector<int64_t>& d) {
  const SamplingParams& p = r.params;
  const LogitsAdjustments& a = r.adjust;
  d.insert(d.end(), {std::bit_cast<int64_t>(p.temperature), p.top_k, std::bit_cast<int64_t>(p.top_p),
                     std::bit_cast<int64_t>(p.min_p), static_cast<int64_t>(p.seed), static_cast<int64_t>(r.draw),
                     r.logprobs, r.target, std::bit_cast<int64_t>(a.presence_penalty),
                     std::bit_cast<int64_t>(a.frequency_penalty), std::bit_cast<int64_t>(a.repetition_penalty),
                     static_cast<int64_t>(a.logit_bias.size()), static_cast<int64_t>(r.banned.size()),
                     static_cast<int64_t>(r.prompt_ids.size()), static_cast<int64_t>(r.output_counts.size())});
  for (const auto& [id, bias] : a.logit_bias) d.insert(d.end(), {id, float_bits(bias)});
  d.insert(d.end(), r.banned.begin(), r.banned.end());
  d.insert(d.end(), r.prompt_ids.begin(), r.prompt_ids.end());
  for (const auto& [id, count] : r.output_counts) d.insert(d.end(), {id, count});
  encode_allowed(r.allowed.get(), d);
}

template <typename Next>
SelectionRequest decode_selection(Next& next, size_t left, int64_t entry) {
  SelectionRequest r;
  SamplingParams& p = r.params;
  LogitsAdjustments& a = r.adjust;
  p.temperature = std::bit_cast<double>(next());
  p.top_k = next();
  p.top_p = std::bit_cast<double>(next());
  p.min_p = std::bit_cast<double>(next());
  p.seed = static_cast<uint64_t>(next());
  r.draw = static_cast<uint64_t>(next());
  r.logprobs = static_cast<int32_t>(next());
  r.target = static_cast<int32_t>(next());
  a.presence_penalty = std::bit_cast<double>(next());
  a.frequency_penalty = std::bit_cast<double>(next());
  a.repetition_penalty = std::bit_cast<double>(next());
  const int64_t nbias = next(), nbanned = next(), nprompt = next(), ncounts = next();
  for (const int64_t n : {nbias, nbanned, nprompt, ncounts}) {
    OLMO2_CHECK(n >= 0 && static_cast<size_t>(n) <= left, "malformed step plan entry ", entry, ": a list of ", n);
  }
  for (int64_t i = 0; i < nbias; ++i) {
    const int32_t id = static_cast<int32_t>(next());
    a.logit_bias.emplace_back(id, bits_float(next()));
  }
  for (int64_t i = 0; i < nbanned; ++i) r.banned.push_back(static_cast<int32_t>(next()));
  for (int64_t i = 0; i < nprompt; ++i) r.prompt_ids.push_back(static_cast<int32_t>(next()));
  for (int64_t i = 0; i < ncounts; ++i) {
    const int32_t id = static_cast<int32_t>(next());
    r.output_counts.emplace_back(id, static_cast<int32_t>(next()));
  }
  const int64_t form = next();
  OLMO2_CHECK(form == kNoMask || form == kAllowedIds || form == kMaskWords, "malformed step plan entry ", entry,
              ": allowed-token mask form ", form);
  if (form == kNoMask) return r;
  const int64_t words = next();
  OLMO2_CHECK(words >= 0 && words <= (int64_t{1} << 26), "malformed step plan entry ", entry, ": a mask of ", words,
              " words");
  auto mask = std::make_shared<std::vector<uint64_t>>(static_cast<size_t>(words), 0);
  if (form == kAllowedIds) {
    const int64_t ids = next();
    OLMO2_CHECK(ids >= 0 && static_cast<size_t>(ids) <= left, "malformed step plan entry ", entry, ": ", ids,
                " allowed ids");
    for (int64_t i = 0; i < ids; ++i) {
      const int64_t id = next();
      OLMO2_CHECK(id >= 0 && id < words * 64, "malformed step plan entry ", entry, ": allowed id ", id,
                  " outside a mask of ", words, " words");
      (*mask)[static_cast<size_t>(id >> 6)] |= uint64_t{1} << (id & 63);
    }
  } else {
    OLMO2_CHECK(static_cast<size_t>(words) <= left, "malformed step plan entry ", entry, ": a mask of ", words,
                " words");
    for (auto& w : *mask) w = std::bit_cast<uint64_t>(next());
  }
  r.allowed = std::move(mask);
  return r;
}

/// One SelectedToken's entries: the token, then `alternatives` slots.
void encode_token(const SelectedToken& t, int32_t alternatives, StepResults& d) {
  d.ids.push_back(t.id);
  d.logprobs.push_back(t.logprob);
  for (int32_t j = 0; j < alternatives; ++j) {
    const bool have = j < static_cast<int32_t>(t.top.size());
    d.ids.push_back(have ? t.top[static_cast<size_t>(j)].id : -1);
    d.logprobs.push_back(have ? t.top[static_cast<size_t>(j)].logit : 0.0f);
  }
}

SelectedToken decode_token(std::span<const int32_t> ids, std::span<const float> logprobs, int32_t alternatives,
                           size_t& at) {
  SelectedToken t;
  t.id = ids[at];
  t.logprob = logprobs[at++];
  for (int32_t j = 0; j < alternatives; ++j, ++at) {
    if (ids[at] >= 0) t.top.push_back({logprobs[at], ids[at]});
  }
  return t;
}
}  // namespace

int64_t StepPlan::sampled() const {
  int64_t n = 0;
  for (const auto& s : sequences) n += s.sample ? 1 : 0;
  return n;
}

int64_t StepPlan::chosen_rows() const {
  int64_t n = 0;
  for (const auto& s : sequences) n += s.rows();
  return n;
}

std::vector<int64_t> encode_plan(const StepPlan& plan) {
  std::vector<int64_t> d = {plan.shutdown ? 1 : 0, plan.micro_batches, static_cast<int64_t>(plan.copies.size())};
  for (const BlockCopy& c : plan.copies) d.insert(d.end(), {c.src, c.dst});
  d.push_back(static_cast<int64_t>(plan.sequences.size()));
  for (const PlannedSequence& s : plan.sequences) {
    d.insert(d.end(), {s.seq_id, s.micro_batch, s.start, s.sample ? 1 : 0, s.draft});
    encode_selection(s.selection, d);
    d.insert(d.end(), {s.score_begin, s.score_end, s.prompt_logprobs, s.next_token, s.trace ? 1 : 0});
    if (s.trace) {
      s.trace->encode(d);
      d.push_back(s.record_from);
    }
    d.insert(d.end(), {static_cast<int64_t>(s.tokens.size()), static_cast<int64_t>(s.blocks.size())});
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
  const int64_t copies = next();
  OLMO2_CHECK(copies >= 0 && copies <= static_cast<int64_t>(d.size()), "malformed step plan: ", copies, " copies");
  for (int64_t c = 0; c < copies; ++c) {
    const int64_t src = next(), dst = next();
    p.copies.push_back({static_cast<int32_t>(src), static_cast<int32_t>(dst)});
  }
  const int64_t n = next();
  OLMO2_CHECK(n >= 0 && p.micro_batches >= 1, "malformed step plan: ", n, " sequences, ", p.micro_batches,
              " micro-batches");
  for (int64_t i = 0; i < n; ++i) {
    PlannedSequence s;
    s.seq_id = next();
    s.micro_batch = static_cast<int32_t>(next());
    s.start = next();
    s.sample = next() != 0;
    s.draft = static_cast<int32_t>(next());
    s.selection = decode_selection(next, d.size() - at, i);
    s.score_begin = next();
    s.score_end = next();
    s.prompt_logprobs = static_cast<int32_t>(next());
    s.next_token = static_cast<int32_t>(next());
    const int64_t traced = next();
    OLMO2_CHECK(traced == 0 || traced == 1, "malformed step plan entry ", i, ": trace flag ", traced);
    if (traced) {
      s.trace = std::make_shared<const trace::TraceSpec>(trace::TraceSpec::decode(d, at));
      s.record_from = next();
      OLMO2_CHECK(s.record_from >= 0, "malformed step plan entry ", i, ": records from position ", s.record_from);
    }
    const int64_t nt = next(), nb = next();
    OLMO2_CHECK(nt >= 1 && nb >= 1 && s.micro_batch >= 0 && s.micro_batch < p.micro_batches && s.draft >= 0 &&
                    s.draft < nt && (s.sample || s.draft == 0),
                "malformed step plan entry ", i);
    OLMO2_CHECK(s.score_begin >= 0 && s.score_begin <= s.score_end && s.score_end <= nt && s.prompt_logprobs >= 0,
                "malformed step plan entry ", i, ": scores positions ", s.score_begin, " … ", s.score_end, " of ",
                nt, " with ", s.prompt_logprobs, " alternatives");
    for (int64_t t = 0; t < nt; ++t) s.tokens.push_back(static_cast<int32_t>(next()));
    for (int64_t b = 0; b < nb; ++b) s.blocks.push_back(static_cast<int32_t>(next()));
    p.sequences.push_back(std::move(s));
  }
  OLMO2_CHECK(at == d.size(), "step plan has ", d.size() - at, " trailing values");
  return p;
}

int64_t results_size(const StepPlan& plan) {
  int64_t n = 0;
  for (const auto& s : plan.sequences) {
    n += s.rows() * (1 + s.selection.logprobs);
    n += s.scored() * (1 + s.prompt_logprobs);
  }
  return n;
}

StepResults encode_results(const StepPlan& plan, const std::vector<SelectedToken>& tokens,
                           const std::vector<std::vector<SelectedToken>>& prompt) {
  StepResults d;
  size_t k = 0;
  for (const auto& s : plan.sequences) {
    for (int64_t r = 0; r < s.rows(); ++r) {
      OLMO2_CHECK(k < tokens.size(), "fewer chosen tokens than chosen rows");
      encode_token(tokens[k++], s.selection.logprobs, d);
    }
  }
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const PlannedSequence& s = plan.sequences[i];
    if (s.scored() == 0) continue;
    OLMO2_CHECK(i < prompt.size() && static_cast<int64_t>(prompt[i].size()) == s.scored(), "sequence ", s.seq_id,
                " scores ", s.scored(), " prompt positions, got ", i < prompt.size() ? prompt[i].size() : 0);
    for (const SelectedToken& t : prompt[i]) encode_token(t, s.prompt_logprobs, d);
  }
  return d;
}

std::vector<SelectedToken> decode_results(const StepPlan& plan, std::span<const int32_t> ids,
                                          std::span<const float> logprobs,
                                          std::vector<std::vector<SelectedToken>>* prompt) {
  const int64_t want = results_size(plan);
  OLMO2_CHECK(static_cast<int64_t>(ids.size()) == want && static_cast<int64_t>(logprobs.size()) == want,
              "step results of ", ids.size(), " ids and ", logprobs.size(), " log-probabilities, expected ",
              want, " of each");
  std::vector<SelectedToken> out;
  size_t at = 0;
  for (const auto& s : plan.sequences) {
    for (int64_t r = 0; r < s.rows(); ++r) out.push_back(decode_token(ids, logprobs, s.selection.logprobs, at));
  }
  if (prompt) prompt->assign(plan.sequences.size(), {});
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const PlannedSequence& s = plan.sequences[i];
    for (int64_t j = 0; j < s.scored(); ++j) {
      SelectedToken t = decode_token(ids, logprobs, s.prompt_logprobs, at);
      if (prompt) (*prompt)[i].push_back(std::move(t));
    }
  }
  return out;
}

}  // namespace olmo2
