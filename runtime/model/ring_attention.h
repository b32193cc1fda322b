// Ring attention for context parallelism: a micro-batch's tokens split over the ranks of
// a CP group in the load-balanced (zigzag) order, each rank attending its queries to the
// key/value blocks that travel around the ring, merged with an online softmax, forward
// and backward (docs/architecture.md §7 "Context parallelism: ring attention").
#pragma once

#include <cstdint>
#include <vector>

#include "ops/dtype.h"
#include "ops/tensor.h"
#include "parallel/communicator.h"

namespace olmo2 {

/// Which rows of a packed micro-batch each CP rank holds (zigzag / load-balanced order).
struct ContextShard {
  int cp = 1;                    ///< ranks in the CP group
  std::vector<int64_t> lengths;  ///< whole length of each sequence of the micro-batch
  /// Row r of rank j: sequence seq[j][r], position pos[j][r] within that sequence.
  std::vector<std::vector<int32_t>> seq, pos;
  /// Rows rank `rank` holds (Σ_i lengths[i] / cp: every rank holds as many).
  /// ShapeError for a rank outside [0, cp).
  int64_t rows(int rank) const;
};

/// Sequence i of length L (L % (2·cp) == 0, else InputError naming L, cp and 2·cp) is cut
/// into 2·cp equal chunks; rank j holds chunks j and 2·cp−1−j, in that order; a rank's rows
/// are its rows of sequence 0, then of sequence 1, ... (packed like PackedTokens). With
/// causal attention every rank then has the same number of (query, key) pairs to compute
/// (the zigzag order of Megatron-LM's context parallelism). InputError also for cp < 1.
ContextShard zigzag_shard(const std::vector<int64_t>& lengths, int cp);

/// The work of one ring hop: query rows of rank `q_rank` against the key/value block of
/// rank `kv_rank`. Both ranks' rows are runs of consecutive positions of one sequence
/// (two per sequence: the zigzag chunks); a pair of runs of the same sequence is computed
/// only when some query of the one may attend some key of the other (causal, and within
/// `window` when > 0), else skipped without computing a score.
struct RingHopWork {
  int64_t pairs = 0;     ///< (query run, key run) pairs of the same sequence
  int64_t computed = 0;  ///< of those, the pairs with at least one allowed (query, key)
};
/// The hop's work as the forward and the backward do it (they skip the same pairs); a hop
/// with computed == 0 is skipped whole. ShapeError for ranks outside [0, shard.cp).
RingHopWork ring_hop_work(const ContextShard& shard, int64_t window, int q_rank, int kv_rank);

/// Forward: q [T_j, H·hd], k, v [T_j, KV·hd] f32 = this rank's rows (rank j = cp.rank()).
/// Query (s, p) attends key (s', p') iff s == s' and p' ≤ p and (window == 0 or p − p' < window).
/// K/V blocks travel around the ring (cp rank j sends to j+1, receives from j−1), cp−1
/// hops, K and V of a block in one message; an online softmax (running max m and sum l
/// per query row and head, the accumulated output rescaled by exp(m_old − m_new) when the
/// max grows: FlashAttention, Dao et al. 2022; Ring Attention, Liu et al. 2023) merges the
/// blocks; a pair of runs with no allowed (query, key) (causal or window) is skipped
/// without computing (ring_hop_work). Scores scaled by 1/√hd; query head h uses kv head
/// h/(H/KV) (GQA). out [T_j, H·hd]; lse [T_j, H] f32: the log-sum-exp of the f32 scaled
/// scores, what the backward recomputes the probabilities from.
///
/// `act` as ops::causal_attention: with bf16 the scores q·kᵀ are rounded to bf16, scaled,
/// and rounded again, the normalised probabilities exp(x − max)/sum are rounded to bf16
/// before P·V, and the output is rounded, as the reference (eager_attention_forward) rounds
/// them. The probabilities need the row's final max and sum, so bf16 goes over the ring
/// twice: the max and sum first (Stats), the probabilities and P·V then (about 1.5× the
/// f32 forward's products and twice its messages). What differs from the reference: its
/// sum adds the exp in key order, the ring block by block (rescaled when the max grows),
/// so the sum may differ in its last bits and a probability or the output then lands one
/// bf16 ulp apart, rarely (tests/model/test_ring_attention.cpp counts how rarely). lse is
/// that of the f32 scores (not the rounded ones'), since the backward, as
/// ops::causal_attention_backward, works in f32.
/// Memory: the m/l state [T_j, H], one K/V block in flight and one score tile per thread
/// (128 query rows by one run of keys), never [T, T].
/// Throws ShapeError on inconsistent shapes (rows ≠ shard.rows(j), H % KV ≠ 0, cp.size()
/// ≠ shard.cp, window < 0); CollectiveTimeout / Error from the communicator.
void ring_attention_forward(parallel::Communicator& cp, const ContextShard& shard, const TensorView& q,
                            const TensorView& k, const TensorView& v, int n_heads, int n_kv_heads,
                            int64_t window, DType act, const TensorView& out, const TensorView& lse);

/// Backward: given dout [T_j, H·hd], writes dq [T_j, H·hd], dk, dv [T_j, KV·hd] (overwritten,
/// not accumulated) for this rank's rows; q, k, v, out, lse as the forward took and gave
/// them. FlashAttention-2's backward per block (Dao 2023): D = rowsum(dout ∘ out) per
/// query row and head, then for each K/V block P = exp(s − lse), dP = dout·vᵀ,
/// dS = P ∘ (dP − D)·scale, dq += dS·k, dk_block += dSᵀ·q, dv_block += Pᵀ·dout. The dK/dV
/// partial sums travel around the ring with their K/V block (one message of k, v, dk, dv)
/// and after cp−1 hops one more hop of dk, dv alone brings them back to their owner.
/// `act`: the forward's. After a bf16 forward `out` is rounded; D must be the f32
/// probabilities' Σ P·dP = dout·(Σ P·v), as ops::causal_attention_backward computes it (the
/// backward of the f32 attention of the stored, rounded q, k, v), so with act = BF16 one
/// more pass over the ring computes Σ exp(s − lse)·v in f32 first (2 products per block:
/// about 40 % more work, and that output's [T_j, H·hd] f32 held). Then, in f32 and bf16
/// alike, dq, dk, dv equal ops::causal_attention_backward on each whole sequence up to the
/// order of the sums.
/// Memory: one block of k, v, dk, dv in hand (moved in place), D [T_j, H], two score tiles
/// per thread. Same errors as the forward.
void ring_attention_backward(parallel::Communicator& cp, const ContextShard& shard, const TensorView& q,
                             const TensorView& k, const TensorView& v, const TensorView& out,
                             const TensorView& lse, const TensorView& dout, int n_heads, int n_kv_heads,
                             int64_t window, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                             DType act = DType::F32);

}  // namespace olmo2
