#include "parallel/vocab_parallel_loss.h"

#include "core/error.h"
#include "parallel/tensor_collectives.h"

namespace olmo2::parallel {

ops::CrossEntropySums vocab_parallel_cross_entropy(const TensorView& logits, int64_t vocab_begin,
                                                   int64_t real_cols, int64_t vocab_size,
                                                   const TensorView& targets, float z_coef, float scale,
                                                   const TensorView& dlogits, Communicator& tp) {
  OLMO2_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "vocab_parallel_cross_entropy: logits ", logits.shape_str(), " targets ", targets.shape_str());
  const int64_t rows = logits.size(0);
  ops::check_targets(targets, vocab_size);  // on every rank before any collective: no rank is left waiting
  const Tensor row_max = Tensor::zeros({rows}, DType::F32, logits.device());
  const Tensor stats = Tensor::zeros({rows, 2}, DType::F32, logits.device());  // (Σ exp, target logit)
  ops::vocab_parallel_ce_row_max(logits, real_cols, row_max.view());
  all_reduce_max(tp, row_max.view());
  ops::vocab_parallel_ce_partials(logits, real_cols, vocab_begin, targets, row_max.view(), stats.view(), dlogits);
  all_reduce_sum(tp, stats.view());
  return ops::vocab_parallel_ce_finish(row_max.view(), stats.view(), targets, vocab_begin, real_cols, z_coef, scale,
                                       dlogits);
}

}  // namespace olmo2::parallel
