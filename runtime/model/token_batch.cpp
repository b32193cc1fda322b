#include "runtime/model/token_batch.h"

#include "ops/tensor_ops.h"

namespace olmo2 {

PackedTokens pack_tokens(const TokenBatch& batch, const ModelConfig& c, Device device) {
  const size_t nseq = batch.tokens.size();
  OLMO2_CHECK(batch.start.empty() || batch.start.size() == nseq, nseq, " sequences with ", batch.start.size(),
              " starts");
  PackedTokens p;
  p.offset.assign(nseq + 1, 0);
  p.start.assign(nseq, 0);
  for (size_t i = 0; i < nseq; ++i) {
    const int64_t n = static_cast<int64_t>(batch.tokens[i].size());
    if (n == 0) OLMO2_THROW(InputError, "sequence ", i, " of the batch is empty");
    for (int64_t t = 0; t < n; ++t) {
      if (batch.tokens[i][t] < 0 || batch.tokens[i][t] >= c.vocab_size) {
        OLMO2_THROW(InputError, "token id ", batch.tokens[i][t], " at position ", t, " of sequence ", i,
                    " is outside the vocabulary [0, ", c.vocab_size, ")");
      }
    }
    if (!batch.start.empty()) p.start[i] = batch.start[i];
    if (p.start[i] < 0) OLMO2_THROW(InputError, "sequence ", i, " starts at position ", p.start[i]);
    if (p.start[i] + n > c.max_position_embeddings) {
      OLMO2_THROW(InputError, "sequence ", i, " reaches position ", p.start[i] + n, " beyond the context length ",
                  c.max_position_embeddings);
    }
    p.offset[i + 1] = p.offset[i] + n;
  }
  const int64_t total = p.offset[nseq];
  p.ids = Tensor::zeros({total}, DType::I32);
  p.positions = Tensor::zeros({total}, DType::I32);
  int32_t* ids = p.ids.i32();
  int32_t* pos = p.positions.i32();
  for (size_t i = 0; i < nseq; ++i) {
    for (int64_t t = 0; t < p.offset[i + 1] - p.offset[i]; ++t) {
      ids[p.offset[i] + t] = batch.tokens[i][t];
      pos[p.offset[i] + t] = static_cast<int32_t>(p.start[i] + t);
    }
  }
  if (device != Device::CPU) {
    for (Tensor* t : {&p.ids, &p.positions}) {
      Tensor d = Tensor::zeros(t->shape(), DType::I32, device);
      ops::copy(t->view(), d.view());
      *t = std::move(d);
    }
  }
  return p;
}

}  // namespace olmo2
