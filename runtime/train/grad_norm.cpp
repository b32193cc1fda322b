#include "runtime/train/grad_norm.h"

#include <cmath>
#include <limits>
#include <map>

#include "runtime/train/grad_sync.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/zero_units.h"

namespace olmo2 {
namespace {
// The slot of a parameter in the per-unit sums: 0 the embedding, 1 + l decoder layer l,
// then the tail (the final norm and lm_head) — the model's order.
int64_t unit_key(const std::string& name) {
  const int kind = zero_unit_kind(name);
  return kind == -1 ? 0 : kind == -2 ? std::numeric_limits<int64_t>::max() : 1 + int64_t{kind};
}
}  // namespace

double global_grad_norm(const std::vector<Parameter>& params, parallel::Communicator* tp,
                        parallel::Communicator* pp, parallel::Communicator* dp_chunks) {
  const int tp_rank = tp ? tp->rank() : 0;
  std::vector<Parameter> owned;
  for (const Parameter& p : params) {
    if (p.owned(tp_rank)) owned.push_back(p);
  }
  if (!pp || pp->size() == 1) {
    std::vector<double> sum{grad_norm_squared_local(owned, true)};
    all_reduce_doubles(dp_chunks, sum);
    all_reduce_doubles(tp, sum);
    return std::sqrt(sum[0]);
  }
  // Pipeline: one sum per unit (the embedding, each layer, the tail), each held by one
  // stage and zeros on the others, added in the model's order on every rank — so the
  // norm does not depend on which stage holds which layers (plain or interleaved 1F1B:
  // docs/architecture.md §5 "Interleaved 1F1B"). The layer count is agreed first.
  std::map<int64_t, std::vector<Parameter>> units;
  int64_t last_layer = -1;
  for (const Parameter& p : owned) {
    const int64_t key = unit_key(p.name);
    units[key].push_back(p);
    if (key != std::numeric_limits<int64_t>::max()) last_layer = std::max(last_layer, key - 1);
  }
  std::vector<int64_t> layers{last_layer + 1};
  pp->all_reduce_max(layers);
  std::vector<double> sum(static_cast<size_t>(layers[0] + 2), 0.0);  // embedding, layers, tail
  for (const auto& [key, ps] : units) {
    const size_t slot = key == std::numeric_limits<int64_t>::max() ? sum.size() - 1 : static_cast<size_t>(key);
    sum.at(slot) = grad_norm_squared_local(ps, true);
  }
  all_reduce_doubles(dp_chunks, sum);
  all_reduce_doubles(tp, sum);
  all_reduce_doubles(pp, sum);  // each slot: its stage's value plus zeros, exact
  double total = 0;
  for (const double s : sum) total += s;
  return std::sqrt(total);
}

}  // namespace olmo2
