#include "runtime/grad_norm.h"

#include <cmath>

#include "runtime/optimizer.h"

namespace olmo2 {

double global_grad_norm(const std::vector<Parameter>& params, parallel::Communicator* tp,
                        parallel::Communicator* pp) {
  const int tp_rank = tp ? tp->rank() : 0;
  std::vector<Parameter> owned;
  for (const Parameter& p : params) {
    if (p.owned(tp_rank)) owned.push_back(p);
  }
  double sum = grad_norm_squared_local(owned, true);
  for (parallel::Communicator* c : {tp, pp}) {
    if (!c || c->size() == 1) continue;
    const float hi = static_cast<float>(sum);
    float pair[2] = {hi, static_cast<float>(sum - static_cast<double>(hi))};
    c->all_reduce_sum(pair);
    sum = static_cast<double>(pair[0]) + static_cast<double>(pair[1]);
  }
  return std::sqrt(sum);
}

}  // namespace olmo2
