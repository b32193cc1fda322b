#include "parallel/partition.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace olmo2::parallel {

namespace {

std::string join(const std::vector<int64_t>& v) {
  std::ostringstream s;
  for (size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

void check_shape(const ModelShape& s) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"num_hidden_layers", s.layers},  {"hidden_size", s.hidden},
      {"num_attention_heads", s.heads}, {"num_key_value_heads", s.kv_heads},
      {"head_dim", s.head_dim},         {"intermediate_size", s.intermediate},
      {"vocab_size", s.vocab}};
  for (const auto& [name, v] : sizes) {
    if (v < 1) OLMO2_THROW(InputError, name, " must be at least 1, got ", v);
  }
  if (s.heads % s.kv_heads != 0) {
    OLMO2_THROW(InputError, "num_attention_heads ", s.heads,
                " is not divisible by num_key_value_heads ", s.kv_heads);
  }
}

// The model's sizes against the axes (the axes themselves and the world are
// Topology::make's to check).
void check_layout(const ModelShape& s, int tp, int pp) {
  if (s.heads % tp != 0) {
    OLMO2_THROW(InputError, "num_attention_heads ", s.heads, " is not divisible by tp ", tp);
  }
  if (s.kv_heads >= tp ? s.kv_heads % tp != 0 : tp % s.kv_heads != 0) {
    OLMO2_THROW(InputError, "num_key_value_heads ", s.kv_heads,
                " neither divisible by nor dividing tp ", tp);
  }
  if (s.intermediate % tp != 0) {
    OLMO2_THROW(InputError, "intermediate_size ", s.intermediate, " is not divisible by tp ", tp);
  }
  if (s.layers < pp) {
    OLMO2_THROW(InputError, "num_hidden_layers ", s.layers, " < pp ", pp,
                ": every stage needs at least one layer");
  }
}

void check_stage_layers(const std::vector<int64_t>& list, int pp, int64_t layers) {
  if (static_cast<int64_t>(list.size()) != pp) {
    OLMO2_THROW(InputError, "--pp-layers ", join(list), " has ", list.size(), " entries for pp ",
                pp);
  }
  int64_t sum = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] < 1) {
      OLMO2_THROW(InputError, "--pp-layers ", join(list), ": stage ", i, " has ", list[i],
                  " layers, every stage needs at least one");
    }
    if (list[i] > layers) {  // also keeps the sum below from overflowing
      OLMO2_THROW(InputError, "--pp-layers ", join(list), ": stage ", i, " has ", list[i],
                  " layers, the model has ", layers, " layers");
    }
    sum += list[i];
  }
  if (sum != layers) {
    OLMO2_THROW(InputError, "--pp-layers ", join(list), " sums to ", sum, ", the model has ",
                layers, " layers");
  }
}

// Fills the parameter counts of `r` from its ranges (docs/architecture.md §5 and partition.h).
void count_parameters(const ModelShape& s, int pp, RankPartition& r) {
  const int64_t h = s.hidden, q = r.q_rows.size(), kv = r.kv_rows.size(), inter = r.mlp_rows.size();
  const int64_t q_part = 2 * q * h + q;     // q_proj rows, o_proj columns, q_norm slice
  const int64_t kv_part = 2 * kv * h + kv;  // k_proj and v_proj rows, k_norm slice
  const int64_t mlp_part = 3 * inter * h;   // gate/up rows, down columns
  const int64_t norm_part = 2 * h;          // post-attention and post-feedforward norms
  const bool tp_owner = r.coords.tp == 0, kv_owner = r.kv_replica == 0;
  const int64_t n = r.layer_count();
  r.parameters = n * (q_part + kv_part + mlp_part + norm_part);
  r.owned_parameters =
      n * (q_part + (kv_owner ? kv_part : 0) + mlp_part + (tp_owner ? norm_part : 0));

  const int64_t real = r.vocab_real.size() * h,
                pad = (r.vocab_rows.size() - r.vocab_real.size()) * h;
  if (r.embedding) {
    r.parameters += real;
    r.owned_parameters += real;
    r.padding_elements += pad;
  }
  if (r.final_norm) {
    r.parameters += h;
    r.owned_parameters += tp_owner ? h : 0;
    const bool same_tensor = s.tied_embeddings && pp == 1;  // lm_head is the embedding
    if (!same_tensor) {
      r.parameters += real;
      r.owned_parameters += s.tied_embeddings ? 0 : real;  // a tied copy is owned by stage 0
      r.padding_elements += pad;
    }
  }
}

std::string range(const Range& r) { return detail::concat("[", r.begin, ",", r.end, ")"); }

// "[0,2)" or, for several chunks, "[0,2)+[4,6)".
std::string layers_text(const std::vector<Range>& chunks) {
  std::string s;
  for (const Range& r : chunks) s += (s.empty() ? "" : "+") + range(r);
  return s;
}

// Columns padded to their widest cell, separated by two spaces; a column of empty cells is left out.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (width[c] == 0) continue;  // a column empty throughout (cp without context parallelism)
      if (c) line += "  ";
      line += row[c] + std::string(width[c] - row[c].size(), ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

}  // namespace

int64_t ModelShape::parameter_count() const {
  const int64_t q = heads * head_dim, kv = kv_heads * head_dim;
  const int64_t per_layer =
      2 * q * hidden + 2 * kv * hidden + q + kv + 3 * hidden * intermediate + 2 * hidden;
  return vocab * hidden * (tied_embeddings ? 1 : 2) + layers * per_layer + hidden;
}

std::vector<int64_t> balanced_stage_layers(int64_t layers, int pp) {
  if (pp < 1) OLMO2_THROW(InputError, "pp must be at least 1, got ", pp);
  if (layers < pp) {
    OLMO2_THROW(InputError, "num_hidden_layers ", layers, " < pp ", pp,
                ": every stage needs at least one layer");
  }
  std::vector<int64_t> out(pp, layers / pp);
  for (int64_t s = 0; s < layers % pp; ++s) ++out[s];
  return out;
}

PartitionPlan make_partition_plan(const ModelShape& shape, int tp, int pp, int dp,
                                  const std::vector<int64_t>& pp_layers, int virtual_stages) {
  return make_partition_plan(shape, Topology::make(Layout{tp, pp, dp}), pp_layers, virtual_stages);
}

void check_virtual_stages(int64_t layers, int pp, int v, bool pp_layers_given) {
  if (v < 1) OLMO2_THROW(InputError, "--pp-virtual ", v, ": a pipeline rank holds at least one model chunk");
  if (v == 1) return;
  if (pp < 2) {
    OLMO2_THROW(InputError, "--pp-virtual ", v, " needs a pipeline (pp ≥ 2), the layout has pp ", pp);
  }
  if (pp_layers_given) {
    OLMO2_THROW(InputError, "--pp-virtual ", v, " splits the layers into equal chunks; it cannot be combined with --pp-layers");
  }
  if (layers % (static_cast<int64_t>(pp) * v) != 0) {
    OLMO2_THROW(InputError, "--pp-virtual ", v, ": num_hidden_layers ", layers, " is not divisible by pp ", pp,
                " × pp-virtual ", v, " = ", static_cast<int64_t>(pp) * v, " (every model chunk needs the same layers)");
  }
}

PartitionPlan make_partition_plan(const ModelShape& shape, const Topology& topology,
                                  const std::vector<int64_t>& pp_layers, int virtual_stages) {
  const int tp = topology.layout().tp, pp = topology.layout().pp, v = virtual_stages;
  check_shape(shape);
  check_layout(shape, tp, pp);
  check_virtual_stages(shape.layers, pp, v, !pp_layers.empty());
  if (!pp_layers.empty()) check_stage_layers(pp_layers, pp, shape.layers);

  PartitionPlan plan;
  plan.shape = shape;
  plan.topology = topology;
  plan.virtual_stages = v;
  plan.stage_layers = pp_layers.empty() ? balanced_stage_layers(shape.layers, pp) : pp_layers;
  if (v > 1) plan.stage_layers.assign(static_cast<size_t>(pp), shape.layers / pp);
  plan.padded_vocab = (shape.vocab + tp - 1) / tp * tp;

  const int64_t hd = shape.head_dim, q_per = shape.heads / tp, inter_per = shape.intermediate / tp,
                vocab_per = plan.padded_vocab / tp;
  const bool replicated = shape.kv_heads < tp;
  const int replicas = replicated ? static_cast<int>(tp / shape.kv_heads) : 1;
  const int64_t kv_per = replicated ? 1 : shape.kv_heads / tp;

  plan.ranks.resize(plan.topology.world());
  // Each stage's chunks: one range of consecutive layers (V = 1), or chunk c of stage s
  // = virtual stage c·pp + s of L/(pp·V) layers.
  std::vector<std::vector<Range>> stage_chunks(pp);
  if (v == 1) {
    for (int stage = 0; stage < pp; ++stage) {
      const int64_t first = stage == 0 ? 0 : stage_chunks[stage - 1].front().end;
      stage_chunks[stage] = {{first, first + plan.stage_layers[stage]}};
    }
  } else {
    const int64_t per = shape.layers / (static_cast<int64_t>(pp) * v);
    for (int stage = 0; stage < pp; ++stage) {
      for (int c = 0; c < v; ++c) {
        const int64_t vs = static_cast<int64_t>(c) * pp + stage;
        stage_chunks[stage].push_back({vs * per, (vs + 1) * per});
      }
    }
  }
  for (int rank = 0; rank < plan.topology.world(); ++rank) {
    RankPartition& r = plan.ranks[rank];
    r.rank = rank;
    r.coords = plan.topology.coords(rank);
    const int t = r.coords.tp, stage = r.coords.pp;
    r.chunks = stage_chunks[stage];
    r.embedding = stage == 0;
    r.final_norm = stage == pp - 1;
    r.q_heads = {t * q_per, (t + 1) * q_per};
    const int64_t kv_first = replicated ? t / replicas : t * kv_per;
    r.kv_heads = {kv_first, kv_first + kv_per};
    r.kv_replicas = replicas;
    r.kv_replica = replicated ? t % replicas : 0;
    r.q_rows = {r.q_heads.begin * hd, r.q_heads.end * hd};
    r.kv_rows = {r.kv_heads.begin * hd, r.kv_heads.end * hd};
    r.mlp_rows = {t * inter_per, (t + 1) * inter_per};
    r.vocab_rows = {t * vocab_per, (t + 1) * vocab_per};
    r.vocab_real = {std::min(r.vocab_rows.begin, shape.vocab),
                    std::min(r.vocab_rows.end, shape.vocab)};
    count_parameters(shape, pp, r);
  }
  return plan;
}

std::string describe_chunks(const PartitionPlan& plan) {
  std::ostringstream out;
  const int pp = plan.topology.layout().pp;
  out << "model chunks: " << plan.shape.layers << " layers over pp " << pp << " x pp-virtual "
      << plan.virtual_stages << " (chunk c of stage s is virtual stage c*pp + s)\n";
  for (const RankPartition& r : plan.ranks) {
    if (r.coords.tp != 0 || r.coords.dp != 0) continue;  // the same on every tp and dp rank of a stage
    for (size_t c = 0; c < r.chunks.size(); ++c) {
      out << "  stage " << r.coords.pp << " chunk " << c << " (virtual stage " << c * pp + r.coords.pp
          << "): layers " << range(r.chunks[c]);
      if (r.embedding && c == 0) out << ", embedding";
      if (r.final_norm && c + 1 == r.chunks.size()) out << ", final norm and lm_head";
      out << "\n";
    }
  }
  return out.str();
}

std::string describe(const PartitionPlan& plan, DType dtype) {
  const ModelShape& s = plan.shape;
  const Layout& l = plan.topology.layout();
  std::ostringstream out;
  if (l.cp > 1) {  // context parallelism: every CP rank holds its (tp, pp) shard whole (docs/architecture.md §4)
    out << "partition plan: tp " << l.tp << " x pp " << l.pp << " x dp " << l.dp << " x cp " << l.cp << " = "
        << plan.topology.world() << " ranks (rank = tp_rank + tp*(cp_rank + cp*(dp_rank + dp*stage)))\n";
    out << "  context: each sequence cut into " << 2 * l.cp << " chunks; cp rank j holds chunks j and "
        << 2 * l.cp - 1 << "-j (zigzag), attention as ring attention over the cp group\n";
  } else {
    out << "partition plan: tp " << l.tp << " x pp " << l.pp << " x dp " << l.dp << " = "
        << plan.topology.world() << " ranks (rank = tp_rank + tp*(dp_rank + dp*stage))\n";
  }
  out << "  stages: " << s.layers << " layers as " << join(plan.stage_layers)
      << "; stage 0 holds the embedding, stage " << l.pp - 1 << " the final norm and lm_head\n";
  out << "  attention: " << s.heads << " query heads, " << s.heads / l.tp << " per rank; ";
  if (s.kv_heads < l.tp) {
    out << s.kv_heads << " kv heads, each replicated on " << l.tp / s.kv_heads
        << " consecutive ranks\n";
  } else {
    out << s.kv_heads << " kv heads, " << s.kv_heads / l.tp << " per rank\n";
  }
  out << "  mlp: intermediate " << s.intermediate << ", " << s.intermediate / l.tp
      << " rows per rank\n";
  out << "  vocab: " << s.vocab;
  if (plan.padded_vocab != s.vocab) out << " padded to " << plan.padded_vocab;
  out << ", " << plan.padded_vocab / l.tp << " rows per rank\n";

  std::vector<std::vector<std::string>> rows = {
      {"rank", "tp", l.cp > 1 ? "cp" : "", "dp", "pp", "layers", "q_heads", "kv_heads", "q_rows", "kv_rows", "mlp_rows",
       "vocab_rows", "holds", "parameters", "bytes", "GiB"}};
  const int64_t element = static_cast<int64_t>(dtype_size(dtype));
  int64_t held = 0, owned = 0;
  for (const RankPartition& r : plan.ranks) {
    std::string kv = range(r.kv_heads);
    if (r.kv_replicas > 1)
      kv += " replica " + std::to_string(r.kv_replica) + "/" + std::to_string(r.kv_replicas);
    std::string vocab = "-", holds;
    if (r.embedding || r.final_norm) {
      vocab = range(r.vocab_real);
      const int64_t pad = r.vocab_rows.size() - r.vocab_real.size();
      if (pad > 0) vocab += " +" + std::to_string(pad) + " pad";
    }
    if (r.embedding) holds = "embed";
    if (r.final_norm) holds += std::string(holds.empty() ? "" : ",") + "norm,lm_head";
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.3f", static_cast<double>(r.bytes(element)) / (1 << 30));
    rows.push_back({std::to_string(r.rank), std::to_string(r.coords.tp),
                    l.cp > 1 ? std::to_string(r.coords.cp) : "", std::to_string(r.coords.dp),
                    std::to_string(r.coords.pp), layers_text(r.chunks),
                    range(r.q_heads), kv, range(r.q_rows), range(r.kv_rows), range(r.mlp_rows),
                    vocab, holds.empty() ? "-" : holds, std::to_string(r.parameters),
                    std::to_string(r.bytes(element)), gib});
    if (r.coords.dp == 0 && r.coords.cp == 0) held += r.parameters, owned += r.owned_parameters;
  }
  out << "  parameters per DP replica: " << held
      << " held (replicated norms and kv heads on each rank), " << owned
      << " unique; bytes below at " << dtype_name(dtype) << "\n";
  out << table(rows);
  return out.str();
}

}  // namespace olmo2::parallel
