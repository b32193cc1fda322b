#include "runtime/model/shard_spec.h"

#include "core/error.h"

namespace olmo2 {

int64_t ShardSpec::layer_count() const {
  int64_t n = 0;
  for (const parallel::Range& r : chunks) n += r.size();
  return n;
}

int64_t ShardSpec::global_layer(int64_t local) const {
  OLMO2_CHECK(local >= 0, "local layer ", local, " < 0");
  int64_t left = local;
  for (const parallel::Range& r : chunks) {
    if (left < r.size()) return r.begin + left;
    left -= r.size();
  }
  OLMO2_THROW(Error, "local layer ", local, " beyond the ", layer_count(), " layers of this rank");
}

int64_t ShardSpec::local_layer(int64_t global) const {
  int64_t first = 0;
  for (const parallel::Range& r : chunks) {
    if (global >= r.begin && global < r.end) return first + (global - r.begin);
    first += r.size();
  }
  OLMO2_THROW(Error, "layer ", global, " is not held by this rank");
}

parallel::Range ShardSpec::chunk_locals(int c) const {
  OLMO2_CHECK(c >= 0 && static_cast<size_t>(c) < chunks.size(), "model chunk ", c, " of ", chunks.size());
  int64_t first = 0;
  for (int i = 0; i < c; ++i) first += chunks[static_cast<size_t>(i)].size();
  return {first, first + chunks[static_cast<size_t>(c)].size()};
}

ShardSpec ShardSpec::whole(const ModelConfig& c) {
  ShardSpec s;
  s.chunks = {{0, c.num_hidden_layers}};
  s.q_heads = {0, c.num_attention_heads};
  s.kv_heads = {0, c.num_key_value_heads};
  s.mlp_rows = {0, c.intermediate_size};
  s.vocab_rows = s.vocab_real = {0, c.vocab_size};
  s.padded_vocab = c.vocab_size;
  return s;
}

ShardSpec ShardSpec::from_plan(const parallel::PartitionPlan& plan, int rank) {
  const parallel::RankPartition& r = plan.ranks.at(static_cast<size_t>(rank));
  ShardSpec s;
  s.chunks = r.chunks, s.q_heads = r.q_heads, s.kv_heads = r.kv_heads, s.mlp_rows = r.mlp_rows;
  s.vocab_rows = r.vocab_rows, s.vocab_real = r.vocab_real;
  s.embedding = r.embedding, s.final_norm = r.final_norm;
  s.k_counts = r.kv_replica == 0;
  s.kv_replicas = r.kv_replicas, s.kv_replica = r.kv_replica;
  s.padded_vocab = plan.padded_vocab;
  return s;
}

}  // namespace olmo2
