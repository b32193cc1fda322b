#include "runtime/model/shard_spec.h"

namespace olmo2 {

ShardSpec ShardSpec::whole(const ModelConfig& c) {
  ShardSpec s;
  s.layers = {0, c.num_hidden_layers};
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
  s.layers = r.layers, s.q_heads = r.q_heads, s.kv_heads = r.kv_heads, s.mlp_rows = r.mlp_rows;
  s.vocab_rows = r.vocab_rows, s.vocab_real = r.vocab_real;
  s.embedding = r.embedding, s.final_norm = r.final_norm;
  s.k_counts = r.kv_replica == 0;
  s.kv_replicas = r.kv_replicas, s.kv_replica = r.kv_replica;
  s.padded_vocab = plan.padded_vocab;
  return s;
}

}  // namespace olmo2
