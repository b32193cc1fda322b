#include "runtime/serve/speculative/verification.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/serve/nonfinite_answer.h"

namespace olmo2 {

namespace {
/// `counts` (ascending ids) with one more occurrence of `id`.
void count_one(std::vector<std::pair<int32_t, int32_t>>& counts, int32_t id) {
  const auto at = std::lower_bound(counts.begin(), counts.end(), id,
                                   [](const std::pair<int32_t, int32_t>& c, int32_t v) { return c.first < v; });
  if (at != counts.end() && at->first == id) {
    ++at->second;
  } else {
    counts.insert(at, {id, 1});
  }
}
}  // namespace

std::vector<SelectionRequest> verification_requests(const PlannedSequence& p) {
  const int64_t n = static_cast<int64_t>(p.tokens.size());
  OLMO2_CHECK(p.draft >= 0 && p.draft < n, "sequence ", p.seq_id, " drafts ", p.draft, " of its ", n, " tokens");
  std::vector<SelectionRequest> rows;
  rows.reserve(static_cast<size_t>(p.draft + 1));
  rows.push_back(p.selection);
  const bool counted = p.selection.adjust.penalties();
  for (int32_t j = 1; j <= p.draft; ++j) {
    SelectionRequest r = rows.back();
    r.draw += 1;
    if (counted) count_one(r.output_counts, p.tokens[static_cast<size_t>(n - p.draft + j - 1)]);
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<SelectedToken> accept_drafts(const PlannedSequence& p, std::span<const SelectedToken> rows) {
  OLMO2_CHECK(static_cast<int64_t>(rows.size()) == p.draft + 1, "sequence ", p.seq_id, " verified ", rows.size(),
              " rows for ", p.draft, " drafted tokens");
  const bool nonfinite =
      std::any_of(rows.begin(), rows.end(), [](const SelectedToken& t) { return t.id == kNonFiniteToken; });
  if (nonfinite && p.draft > 0) return {};
  const size_t first_draft = p.tokens.size() - static_cast<size_t>(p.draft);
  std::vector<SelectedToken> out;
  for (size_t j = 0; j < rows.size(); ++j) {
    out.push_back(rows[j]);
    if (j == rows.size() - 1 || rows[j].id != p.tokens[first_draft + j]) break;
  }
  return out;
}

}  // namespace olmo2
