// Cross-entropy + Z-loss over logits whose vocabulary is split across tensor-parallel
// ranks (vocab-parallel lm_head), forward and backward, without gathering the logits.
#pragma once

#include <cstdint>

#include "ops/backward.h"
#include "parallel/communicator.h"

namespace olmo2::parallel {

/// The TP counterpart of ops::cross_entropy_zloss. This rank holds logits [T, V_local]
/// for the token ids [vocab_begin, vocab_begin + V_local); only its first `real_cols`
/// columns are real ids (the rest pad the vocabulary to a multiple of tp and take no
/// part). Two collectives over `tp`, whatever the vocabulary size: an all-reduce (max)
/// of the per-row maxima [T], then one all-reduce (sum) of [T, 2] = (Σ exp(x − max),
/// the target's logit on the rank that holds it). logsumexp is taken over the WHOLE
/// vocabulary, so every rank computes the same lse, CE and Z-loss.
/// dlogits (may alias logits) gets scale·(1 + 2·z_coef·lse)·softmax − scale·onehot on
/// the real columns of counted rows, zeros elsewhere. Returns the sums (identical on
/// every rank: count them once). Throws InputError for a target outside the vocabulary
/// that is not kIgnoreIndex (checked on every rank against `vocab_size` before any
/// collective, so no rank is left waiting), ShapeError on mismatched shapes,
/// CollectiveTimeout if a peer never joins. targets: [T] i32. The local work is
/// ops::vocab_parallel_ce_{row_max, partials, finish}. Source: Megatron-LM's
/// vocab-parallel cross-entropy (the max/sum/target all-reduces); docs/architecture.md
/// §5, §7 and §11.2 (logits [0, 0.5, …, 3.5] with target 2 split over two ranks:
/// log Z = 4.414267, cross-entropy 3.414267 on every rank).
ops::CrossEntropySums vocab_parallel_cross_entropy(const TensorView& logits, int64_t vocab_begin,
                                                   int64_t real_cols, int64_t vocab_size,
                                                   const TensorView& targets, float z_coef, float scale,
                                                   const TensorView& dlogits, Communicator& tp);

}  // namespace olmo2::parallel
