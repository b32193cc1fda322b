// Helpers of the scheduler tests: sequences of consecutive token ids, chosen tokens, a
// planned sequence in brief, and the block accounting every step must keep.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/serve/scheduler.h"

namespace olmo2::test {

/// Sequence `id` with the prompt first, first+1, …, first+n_prompt−1 and seed 7.
inline SchedSequence seq(int64_t id, int n_prompt, int32_t first = 100) {
  SchedSequence s;
  s.id = id;
  for (int i = 0; i < n_prompt; ++i) s.tokens.push_back(first + i);
  s.prompt_len = n_prompt;
  s.selection.params.seed = 7;
  return s;
}

/// A step's results: one SelectedToken per id.
inline std::vector<SelectedToken> chosen(std::initializer_list<int32_t> ids) {
  std::vector<SelectedToken> out;
  for (int32_t id : ids) out.push_back({id, 0.0f, {}});
  return out;
}

/// Every block is either held (by a sequence of `ids`) or free, never both: the distinct
/// blocks the sequences hold plus the free ones (cached or not) make the pool, and each
/// held block's reference count is the number of tables that list it.
inline void expect_accounting(const Scheduler& s, const std::vector<int64_t>& ids) {
  std::map<int32_t, int32_t> refs;
  for (int64_t id : ids) {
    if (const SchedSequence* q = s.find(id)) {
      for (int32_t b : q->blocks) ++refs[b];
    }
  }
  EXPECT_GE(s.free_blocks(), 0);
  EXPECT_EQ(s.free_blocks() + static_cast<int64_t>(refs.size()), s.options().num_blocks);
  for (const auto& [b, n] : refs) EXPECT_EQ(s.blocks().refs(b), n) << "block " << b;
}

/// (id, start, new tokens, block-table length, sample, draw) of a planned sequence.
using Brief = std::tuple<int64_t, int64_t, size_t, size_t, bool, uint64_t>;
inline Brief brief(const PlannedSequence& q) {
  return {q.seq_id, q.start, q.tokens.size(), q.blocks.size(), q.sample, q.selection.draw};
}

/// A model of one rank's KV pool that records, for each row, the token prefix whose last
/// position was written there. apply() does what every rank does with a plan — the
/// copies, then each planned chunk's writes — and first checks that every planned
/// sequence would read its own prefix at each cached position [0, start): so cache hits,
/// forks, copy-on-write and eviction are checked by what attention would see.
class PoolModel {
 public:
  PoolModel(int64_t num_blocks, int64_t block_size)
      : bs_(block_size), rows_(static_cast<size_t>(num_blocks * block_size)) {}
  /// Applies `plan`, whose sequences `s` knows (call before s.step_done). Returns the
  /// number of wrong positions read (each also a test failure).
  int apply(const StepPlan& plan, const Scheduler& s) {
    for (const BlockCopy& c : plan.copies) {
      for (int64_t r = 0; r < bs_; ++r) rows_[static_cast<size_t>(c.dst * bs_ + r)] = rows_[static_cast<size_t>(c.src * bs_ + r)];
    }
    int wrong = 0;
    for (const PlannedSequence& q : plan.sequences) {
      const SchedSequence* seq = s.find(q.seq_id);
      if (!seq) {
        ADD_FAILURE() << "planned sequence " << q.seq_id << " unknown";
        return ++wrong;
      }
      for (int64_t p = 0; p < q.start + static_cast<int64_t>(q.tokens.size()); ++p) {
        const std::vector<int32_t> want(seq->tokens.begin(), seq->tokens.begin() + p + 1);
        std::vector<int32_t>& row = rows_[static_cast<size_t>(q.blocks[static_cast<size_t>(p / bs_)] * bs_ + p % bs_)];
        if (p >= q.start) {
          row = want;  // the planned chunk writes its keys and values
        } else if (row != want) {
          ADD_FAILURE() << "sequence " << q.seq_id << " reads position " << p << " from block "
                        << q.blocks[static_cast<size_t>(p / bs_)] << ", which holds another prefix";
          ++wrong;
        }
      }
    }
    return wrong;
  }

 private:
  int64_t bs_;
  std::vector<std::vector<int32_t>> rows_;
};

}  // namespace olmo2::test
