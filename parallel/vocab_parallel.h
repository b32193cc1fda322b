// The vocab-parallel embedding and the gathering of vocab-parallel logits: the rows of
// the embedding and lm_head are split over the tensor-parallel group (docs/architecture.md
// §5), each rank holding the ids vocab_begin … vocab_begin + V_local − 1.
#pragma once

#include <cstdint>

#include "ops/tensor.h"
#include "parallel/communicator.h"

namespace olmo2::parallel {

/// out = the embeddings of `ids`. table [V_local, h] f32 holds this rank's rows, from id
/// vocab_begin. With `tp` (more than one rank) each rank fills the rows of the ids it
/// holds (ops::embedding_slice, zeros for the others) and one all-reduce (sum) of out
/// [n, h] over tp completes every row on every rank; with `tp` null or of one rank the
/// table is the whole vocabulary (vocab_begin 0) and ids outside it throw InputError.
/// ids [n] i32, out [n, h] f32 contiguous. CollectiveTimeout if a peer never joins.
/// Source: Megatron-LM's VocabParallelEmbedding.
void vocab_parallel_embedding(const TensorView& ids, const TensorView& table, int64_t vocab_begin,
                              const TensorView& out, Communicator* tp);

/// The backward: dtable[id − vocab_begin] += dout[i] for the ids this rank holds (no
/// collective: every rank has the whole dout). Same views as the forward.
void vocab_parallel_embedding_backward(const TensorView& ids, const TensorView& dout, int64_t vocab_begin,
                                       const TensorView& dtable, Communicator* tp);

/// The whole logits [rows, vocab_size] from each rank's slice `local` [rows, V_local]
/// (V_local·tp ≥ vocab_size; ids past vocab_size are padding and dropped): one
/// all-gather over tp, then each rank's block copied into its columns. f32, contiguous.
Tensor gather_vocab_parallel_logits(const TensorView& local, int64_t vocab_size, Communicator& tp);

}  // namespace olmo2::parallel
