#include "parallel/vocab_parallel.h"

#include <algorithm>

#include "ops/backward.h"
#include "ops/embedding.h"
#include "ops/tensor_ops.h"
#include "parallel/tensor_collectives.h"

namespace olmo2::parallel {

namespace {
Communicator* split(Communicator* tp) { return tp && tp->size() > 1 ? tp : nullptr; }
}  // namespace

void vocab_parallel_embedding(const TensorView& ids, const TensorView& table, int64_t vocab_begin,
                              const TensorView& out, Communicator* tp) {
  if (!split(tp)) {
    OLMO2_CHECK(vocab_begin == 0, "vocab_parallel_embedding: a whole table starts at id 0, got ", vocab_begin);
    return ops::embedding(ids, table, out);
  }
  ops::embedding_slice(ids, table, vocab_begin, out);
  all_reduce_sum(*tp, out);
}

void vocab_parallel_embedding_backward(const TensorView& ids, const TensorView& dout, int64_t vocab_begin,
                                       const TensorView& dtable, Communicator* tp) {
  if (!split(tp)) return ops::embedding_backward(ids, dout, dtable);
  ops::embedding_slice_backward(ids, dout, vocab_begin, dtable);
}

Tensor gather_vocab_parallel_logits(const TensorView& local, int64_t vocab_size, Communicator& tp) {
  OLMO2_CHECK(local.dim() == 2 && local.size(1) * tp.size() >= vocab_size, "gather_vocab_parallel_logits: ",
              local.shape_str(), " on ", tp.size(), " ranks for a vocabulary of ", vocab_size);
  const int64_t rows = local.size(0), vl = local.size(1);
  const Tensor all = Tensor::zeros({tp.size() * rows, vl}, DType::F32, local.device());  // rank-major
  if (local.is_contiguous()) {
    all_gather(tp, local, all.view());
  } else {
    const Tensor mine = Tensor::zeros({rows, vl}, DType::F32, local.device());
    ops::copy(local, mine.view());
    all_gather(tp, mine.view(), all.view());
  }
  Tensor logits = Tensor::zeros({rows, vocab_size}, DType::F32, local.device());
  for (int r = 0; r < tp.size(); ++r) {
    const int64_t first = r * vl, width = std::min(vl, vocab_size - first);
    if (width <= 0) break;
    ops::copy(all.view().rows(r * rows, (r + 1) * rows).cols(0, width), logits.view().cols(first, first + width));
  }
  return logits;
}

}  // namespace olmo2::parallel
