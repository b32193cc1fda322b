#include "runtime/model/config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/model/config_olmo3.h"
#include "runtime/model/config_reader.h"

namespace olmo2 {

using nlohmann::json;
using config_detail::Reader;

ModelConfig ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) OLMO2_THROW(InputError, source, ": expected a JSON object");
  Reader r{j, source};
  ModelConfig c;

  const json* arch = r.find("architectures");
  if (!arch) r.fail("architectures", "is missing");
  if (!arch->is_array() || arch->size() != 1 || !(*arch)[0].is_string()) {
    r.fail("architectures", "must be a list of one name, got " + arch->dump());
  }
  c.architecture = (*arch)[0].get<std::string>();
  if (c.architecture != "Olmo2ForCausalLM" && c.architecture != "Olmo3ForCausalLM") {
    OLMO2_THROW(InputError, source, ": architecture \"", c.architecture,
                "\" is not supported; this program runs Olmo2ForCausalLM and Olmo3ForCausalLM");
  }
  const char* model_type = c.olmo3() ? "olmo3" : "olmo2";
  if (const json* mt = r.find("model_type"); mt && *mt != model_type) {
    r.fail("model_type", "is " + mt->dump() + " but architectures says " + c.architecture);
  }

  c.vocab_size = r.positive("vocab_size");
  c.hidden_size = r.positive("hidden_size");
  c.intermediate_size = r.positive("intermediate_size");
  c.num_hidden_layers = r.positive("num_hidden_layers");
  c.num_attention_heads = r.positive("num_attention_heads");
  c.num_key_value_heads = r.positive("num_key_value_heads", c.num_attention_heads);
  c.max_position_embeddings = r.positive("max_position_embeddings");
  c.rms_norm_eps = r.number("rms_norm_eps");
  if (c.olmo3()) config_detail::read_olmo3_attention(r, c);
  else config_detail::read_olmo2_attention(r, c);
  if (r.find("initializer_range")) c.initializer_range = r.number("initializer_range");
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  if (const json* e = r.find("eos_token_id"); e && e->is_array()) {  // a list: stop at any
    for (const json& id : *e) {
      if (!id.is_number_integer()) r.fail("eos_token_id", "must be token ids, got " + e->dump());
      c.eos_token_ids.push_back(id.get<int64_t>());
    }
  } else if (const auto id = r.token_id("eos_token_id")) {
    c.eos_token_ids.push_back(*id);
  }
  c.pad_token_id = r.token_id("pad_token_id");
  c.bos_token_id = r.token_id("bos_token_id");

  if (!(c.rms_norm_eps > 0)) r.fail("rms_norm_eps", "must be positive");
  if (!(c.rope_theta > 0)) r.fail("rope_theta", "must be positive");
  if (c.hidden_size % c.num_attention_heads != 0) {
    OLMO2_THROW(InputError, source, ": hidden_size ", c.hidden_size,
                " is not divisible by num_attention_heads ", c.num_attention_heads);
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (r.find("head_dim") && r.integer("head_dim") != c.head_dim) {
    OLMO2_THROW(InputError, source, ": head_dim ", r.integer("head_dim"),
                " contradicts hidden_size / num_attention_heads = ", c.head_dim);
  }
  if (c.head_dim % 2 != 0) {
    OLMO2_THROW(InputError, source, ": head_dim ", c.head_dim, " must be even for RoPE");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    OLMO2_THROW(InputError, source, ": num_attention_heads ", c.num_attention_heads,
                " is not divisible by num_key_value_heads ", c.num_key_value_heads);
  }
  if (r.boolean("attention_bias", false)) r.fail("attention_bias", "is true; OLMo 2 has no biases");
  if (const json* act = r.find("hidden_act"); act && *act != "silu") {
    r.fail("hidden_act", "is " + act->dump() + "; OLMo 2 uses silu");
  }
  std::vector<std::pair<const char*, int64_t>> ids;
  for (int64_t e : c.eos_token_ids) ids.emplace_back("eos_token_id", e);
  if (c.pad_token_id) ids.emplace_back("pad_token_id", *c.pad_token_id);
  if (c.bos_token_id) ids.emplace_back("bos_token_id", *c.bos_token_id);
  for (const auto& [f, id] : ids) {
    if (id < 0 || id >= c.vocab_size) {
      r.fail(f, "is " + std::to_string(id) + ", outside the vocabulary [0, " +
                    std::to_string(c.vocab_size) + ")");
    }
  }
  // Bounds that keep every size a valid BLAS dimension and the parameter count exact.
  for (const auto& [f, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                             {"hidden_size", c.hidden_size},
                             {"intermediate_size", c.intermediate_size},
                             {"num_hidden_layers", c.num_hidden_layers},
                             {"max_position_embeddings", c.max_position_embeddings}}) {
    if (v > (int64_t{1} << 24)) r.fail(f, "is " + std::to_string(v) + ", above the supported 16777216");
  }
  const json* dt = r.find("torch_dtype");
  if (!dt) dt = r.find("dtype");
  if (dt) {
    if (*dt == "float32") c.dtype = DType::F32;
    else if (*dt == "bfloat16") c.dtype = DType::BF16;
    else if (*dt == "float16") c.dtype = DType::F16;
    else r.fail("torch_dtype", "is " + dt->dump() + "; supported: float32, bfloat16, float16");
  }
  return c;
}

ModelConfig ModelConfig::load(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!std::filesystem::is_regular_file(path)) {
    OLMO2_THROW(InputError, "cannot open ", path, " (is --model a model directory?)");
  }
  return load_file(path);
}

ModelConfig ModelConfig::load_file(const std::string& path) {
  std::ifstream in(path);
  if (!std::filesystem::is_regular_file(path) || !in) OLMO2_THROW(InputError, "cannot read ", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    OLMO2_THROW(InputError, path, ": not valid JSON: ", e.what());
  }
  return from_json(j, path);
}

json ModelConfig::to_json() const {
  json j = {{"architectures", {architecture}},
            {"model_type", "olmo2"},
            {"vocab_size", vocab_size},
            {"hidden_size", hidden_size},
            {"intermediate_size", intermediate_size},
            {"num_hidden_layers", num_hidden_layers},
            {"num_attention_heads", num_attention_heads},
            {"num_key_value_heads", num_key_value_heads},
            {"max_position_embeddings", max_position_embeddings},
            {"rms_norm_eps", rms_norm_eps},
            {"rope_theta", rope_theta},
            {"rope_scaling", nullptr},
            {"attention_bias", false},
            {"attention_dropout", 0.0},
            {"hidden_act", "silu"},
            {"initializer_range", initializer_range},
            {"tie_word_embeddings", tie_word_embeddings},
            {"use_cache", true},
            {"torch_dtype", dtype == DType::BF16 ? "bfloat16"
                            : dtype == DType::F16 ? "float16"
                                                  : "float32"}};
  j["eos_token_id"] = eos_token_ids.empty()       ? json(nullptr)
                      : eos_token_ids.size() == 1 ? json(eos_token_ids[0])
                                                  : json(eos_token_ids);
  j["pad_token_id"] = pad_token_id ? json(*pad_token_id) : json(nullptr);
  j["bos_token_id"] = bos_token_id ? json(*bos_token_id) : json(nullptr);
  if (olmo3()) config_detail::write_olmo3_attention(*this, j);
  return j;
}

bool ModelConfig::has_sliding_layers() const {
  for (AttentionType t : layer_types) {
    if (t == AttentionType::Sliding) return true;
  }
  return false;
}

namespace {

void check_layer(const ModelConfig& c, int64_t layer) {
  if (layer < 0 || layer >= c.num_hidden_layers) {
    OLMO2_THROW(ShapeError, "layer ", layer, " is outside the model's ", c.num_hidden_layers, " layers");
  }
}

}  // namespace

int64_t ModelConfig::attention_window(int64_t layer) const {
  check_layer(*this, layer);
  if (layer_types.empty()) return 0;  // a config built field by field: OLMo 2
  return layer_types[static_cast<size_t>(layer)] == AttentionType::Sliding ? sliding_window : 0;
}

RopeParameters ModelConfig::rope_parameters(int64_t layer) const {
  check_layer(*this, layer);
  if (layer_types.empty() && rope_full.theta == 0) {
    // A config built field by field (tests, benches) sets only rope_theta: OLMo 2's plain RoPE.
    RopeParameters p;
    p.theta = rope_theta;
    return p;
  }
  const bool sliding = !layer_types.empty() && layer_types[static_cast<size_t>(layer)] == AttentionType::Sliding;
  return sliding ? rope_sliding : rope_full;
}

parallel::ModelShape model_shape(const ModelConfig& c) {
  return {.layers = c.num_hidden_layers,
          .hidden = c.hidden_size,
          .heads = c.num_attention_heads,
          .kv_heads = c.num_key_value_heads,
          .head_dim = c.head_dim,
          .intermediate = c.intermediate_size,
          .vocab = c.vocab_size,
          .tied_embeddings = c.tie_word_embeddings};
}

std::vector<int64_t> ModelConfig::stop_token_ids() const {
  std::vector<int64_t> ids = eos_token_ids;
  ids.insert(ids.end(), generation_eos_token_ids.begin(), generation_eos_token_ids.end());
  return ids;
}

void ModelConfig::add_generation_eos_token_ids(const std::vector<int64_t>& ids) {
  for (int64_t id : ids) {
    const auto in = [id](const std::vector<int64_t>& v) { return std::find(v.begin(), v.end(), id) != v.end(); };
    if (!in(eos_token_ids) && !in(generation_eos_token_ids)) generation_eos_token_ids.push_back(id);
  }
}

int64_t ModelConfig::parameter_count() const {
  const int64_t h = hidden_size, q = num_attention_heads * head_dim,
                kv = num_key_value_heads * head_dim, inter = intermediate_size;
  const int64_t per_layer = h * q + 2 * h * kv + q * h  // q, k, v, o
                            + q + kv                    // q_norm, k_norm
                            + 3 * h * inter             // gate, up, down
                            + 2 * h;                    // post-attention, post-feedforward norms
  const int64_t embeddings = vocab_size * h * (tie_word_embeddings ? 1 : 2);
  return embeddings + num_hidden_layers * per_layer + h;
}

std::string ModelConfig::summary() const {
  std::ostringstream s;
  s << "architecture            " << architecture << "\n"
    << "vocab_size              " << vocab_size << "\n"
    << "hidden_size             " << hidden_size << "\n"
    << "intermediate_size       " << intermediate_size << "\n"
    << "num_hidden_layers       " << num_hidden_layers << "\n"
    << "num_attention_heads     " << num_attention_heads << "\n"
    << "num_key_value_heads     " << num_key_value_heads << "\n"
    << "head_dim                " << head_dim << "\n"
    << "max_position_embeddings " << max_position_embeddings << "\n"
    << "rms_norm_eps            " << rms_norm_eps << "\n"
    << "rope_theta              " << rope_theta << "\n"
    << "tie_word_embeddings     " << (tie_word_embeddings ? "true" : "false") << "\n"
    << "eos_token_id            " << (eos_token_ids.empty() ? std::string("none") : [&] {
         std::string s;
         for (size_t i = 0; i < eos_token_ids.size(); ++i) s += (i ? std::string(",") : std::string()) + std::to_string(eos_token_ids[i]);
         return s;
       }()) << "\n"
    << (olmo3() ? config_detail::olmo3_summary(*this) : std::string())
    << "dtype                   " << dtype_name(dtype) << "\n"
    << "parameters              " << parameter_count() << "\n";
  return s.str();
}

}  // namespace olmo2
