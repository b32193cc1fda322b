#include "runtime/train/grad_norm.h"

#include <cmath>

#include "runtime/train/grad_sync.h"
#include "runtime/train/optimizer.h"

namespace olmo2 {

double global_grad_norm(const std::vector<Parameter>& params, parallel::Communicator* tp,
                        parallel::Communicator* pp, parallel::Communicator* dp_chunks) {
  const int tp_rank = tp ? tp->rank() : 0;
  std::vector<Parameter> owned;
  for (const Parameter& p : params) {
    if (p.owned(tp_rank)) owned.push_back(p);
  }
  std::vector<double> sum{grad_norm_squared_local(owned, true)};
  all_reduce_doubles(dp_chunks, sum);
  all_reduce_doubles(tp, sum);
  all_reduce_doubles(pp, sum);
  return std::sqrt(sum[0]);
}

}  // namespace olmo2
