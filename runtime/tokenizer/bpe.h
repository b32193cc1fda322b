// Byte-pair-encoding model over raw bytes (the `BPE` model of HF tokenizer.json).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace olmo2 {

/// Vocabulary of byte strings and ranked merges. Encoding a piece starts from its
/// single bytes and repeatedly merges the adjacent pair of lowest rank (leftmost first
/// among equal ranks) until no listed merge applies — the algorithm of GPT-2 and of
/// the `tokenizers` BPE model. Sources: Sennrich et al. 2016; Radford et al. 2019.
class Bpe {
 public:
  Bpe() = default;
  /// `vocab[id]` is the byte string of token `id` (empty for unused ids); `merges` are
  /// (left, right) byte strings in rank order. Throws InputError naming a merge whose
  /// parts or result are not in the vocabulary, or a single byte with no token.
  Bpe(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      bool ignore_merges);

  /// Appends the ids of one pre-tokenized piece (raw bytes) to `out`. Thread-safe;
  /// O(n log n) in the piece's length n (a heap of candidate merges over a linked list).
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  const std::string& bytes(int32_t id) const { return vocab_[static_cast<size_t>(id)]; }
  size_t size() const { return vocab_.size(); }
  /// Id of an exact byte string, or −1.
  int32_t find(std::string_view bytes) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_id_[256] = {};
  bool ignore_merges_ = false;
};

}  // namespace olmo2
