#include "runtime/generation/logits_adjustments.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "runtime/generation/request_rules.h"

namespace olmo2 {

namespace {
/// The position in `logits` of `id`, or −1 when another rank holds it.
int64_t local(int64_t id, int64_t first_id, size_t n) {
  const int64_t j = id - first_id;
  return j >= 0 && j < static_cast<int64_t>(n) ? j : -1;
}

template <typename T, typename Id>
void check_ascending(std::span<const T> list, Id id_of, const char* what) {
  for (size_t i = 1; i < list.size(); ++i) {
    OLMO2_CHECK(id_of(list[i - 1]) < id_of(list[i]), what, " not ascending without repeats at position ", i, ": id ",
                id_of(list[i - 1]), " then ", id_of(list[i]));
  }
}
}  // namespace

void apply_logits_adjustments(std::span<float> logits, int64_t first_id, const LogitsAdjustments& adjust,
                              std::span<const int32_t> banned, std::span<const int32_t> prompt_ids,
                              std::span<const std::pair<int32_t, int32_t>> output_counts) {
  const auto id = [](int32_t x) { return x; };
  const auto first = [](const auto& p) { return p.first; };
  check_ascending(banned, id, "banned ids");
  check_ascending(prompt_ids, id, "prompt ids");
  check_ascending(std::span<const std::pair<int32_t, float>>(adjust.logit_bias), first, "logit_bias ids");
  check_ascending(output_counts, first, "output token counts");
  const size_t n = logits.size();
  for (int32_t b : banned) {
    if (const int64_t j = local(b, first_id, n); j >= 0) logits[static_cast<size_t>(j)] = -INFINITY;
  }
  for (const auto& [t, bias] : adjust.logit_bias) {
    if (const int64_t j = local(t, first_id, n); j >= 0) logits[static_cast<size_t>(j)] += bias;
  }
  if (adjust.repetition_penalty != 1) {
    if (const RuleVerdict v = repetition_penalty_rule(adjust.repetition_penalty)) OLMO2_THROW(Error, v->reason);
    const float r = static_cast<float>(adjust.repetition_penalty);
    auto penalise = [&](int32_t t) {
      if (const int64_t j = local(t, first_id, n); j >= 0) {
        float& l = logits[static_cast<size_t>(j)];
        l = l > 0 ? l / r : l * r;
      }
    };
    // Each id of prompt ∪ output once: a merge of the two ascending lists.
    size_t p = 0, o = 0;
    while (p < prompt_ids.size() || o < output_counts.size()) {
      const int32_t a = p < prompt_ids.size() ? prompt_ids[p] : std::numeric_limits<int32_t>::max();
      const int32_t b = o < output_counts.size() ? output_counts[o].first : std::numeric_limits<int32_t>::max();
      penalise(std::min(a, b));
      p += a <= b ? 1 : 0;
      o += b <= a ? 1 : 0;
    }
  }
  const float f = static_cast<float>(adjust.frequency_penalty), pres = static_cast<float>(adjust.presence_penalty);
  if (f != 0 || pres != 0) {
    for (const auto& [t, count] : output_counts) {
      if (const int64_t j = local(t, first_id, n); j >= 0) {
        float& l = logits[static_cast<size_t>(j)];
        l -= f * static_cast<float>(count);  // as vLLM's two f32 tensor subtractions
        l -= pres;
      }
    }
  }
}

void apply_allowed_mask(std::span<float> logits, int64_t first_id, std::span<const uint64_t> allowed) {
  const int64_t words = static_cast<int64_t>(allowed.size());
  for (size_t j = 0; j < logits.size(); ++j) {
    const int64_t id = first_id + static_cast<int64_t>(j);
    if (id >> 6 >= words || !((allowed[static_cast<size_t>(id >> 6)] >> (id & 63)) & 1)) logits[j] = -INFINITY;
  }
}

}  // namespace olmo2
