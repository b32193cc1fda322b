// A model of one rank's KV pools under KV groups (docs/architecture.md §8) for the
// scheduler tests: each row records the group and the token prefix whose last position
// was written there, so a plan is checked by what every layer's attention would read.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "runtime/serve/scheduler.h"

namespace olmo2::test {

class GroupPoolModel {
 public:
  GroupPoolModel(int64_t num_blocks, int64_t block_size, std::vector<int64_t> windows)
      : bs_(block_size), windows_(std::move(windows)), rows_(static_cast<size_t>(num_blocks * block_size)) {}

  /// Applies `plan` (the copies, then each chunk's writes in every group) after checking
  /// that each planned sequence reads its own prefix, in the right group, at every cached
  /// position its window sees in each group — never a released (−1) entry there. Call
  /// before s.step_done. Returns the wrong reads (each also a test failure).
  int apply(const StepPlan& plan, const Scheduler& s) {
    for (const BlockCopy& c : plan.copies) {
      for (int64_t r = 0; r < bs_; ++r) rows_[static_cast<size_t>(c.dst * bs_ + r)] = rows_[static_cast<size_t>(c.src * bs_ + r)];
    }
    const size_t groups = windows_.size();
    int wrong = 0;
    for (const PlannedSequence& q : plan.sequences) {
      const SchedSequence* seq = s.find(q.seq_id);
      if (!seq || q.blocks.size() % groups != 0) {
        ADD_FAILURE() << "planned sequence " << q.seq_id << " unknown or with a table of " << q.blocks.size();
        return ++wrong;
      }
      const size_t n = q.blocks.size() / groups;
      for (size_t g = 0; g < groups; ++g) {
        const int64_t w = windows_[g];
        const int64_t from = w > 0 ? std::max<int64_t>(0, q.start - w + 1) : 0;
        for (int64_t p = from; p < q.start + static_cast<int64_t>(q.tokens.size()); ++p) {
          const int32_t id = q.blocks[g * n + static_cast<size_t>(p / bs_)];
          if (id < 0) {
            ADD_FAILURE() << "sequence " << q.seq_id << " would read position " << p << " of group " << g
                          << " from a released block";
            ++wrong;
            continue;
          }
          Row want{static_cast<int64_t>(g), std::vector<int32_t>(seq->tokens.begin(), seq->tokens.begin() + p + 1)};
          Row& row = rows_[static_cast<size_t>(id * bs_ + p % bs_)];
          if (p >= q.start) {
            row = std::move(want);
          } else if (row != want) {
            ADD_FAILURE() << "sequence " << q.seq_id << " reads position " << p << " of group " << g << " from block "
                          << id << ", which holds another prefix or group";
            ++wrong;
          }
        }
      }
    }
    return wrong;
  }

 private:
  using Row = std::pair<int64_t, std::vector<int32_t>>;
  int64_t bs_;
  std::vector<int64_t> windows_;
  std::vector<Row> rows_;
};

/// Every id is held (by the sequences `ids`, −1 entries aside) or free, never both, and
/// each held id's reference count is the number of tables listing it.
inline void expect_group_accounting(const Scheduler& s, const std::vector<int64_t>& ids) {
  std::map<int32_t, int32_t> refs;
  for (int64_t id : ids) {
    if (const SchedSequence* q = s.find(id)) {
      for (int32_t b : q->blocks) {
        if (b >= 0) ++refs[b];
      }
    }
  }
  EXPECT_EQ(s.free_blocks() + static_cast<int64_t>(refs.size()), s.options().num_blocks);
  for (const auto& [b, n] : refs) EXPECT_EQ(s.blocks().refs(b), n) << "block " << b;
}

}  // namespace olmo2::test
