#include "runtime/train/generation_config_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace olmo2 {

using nlohmann::json;

namespace {
/// A token id as generation_config.json holds one: an integer ≥ 0.
bool is_id(const json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }
}  // namespace

json generation_config_to_keep(const std::string& dir) {
  json kept = json::object();
  if (dir.empty()) return kept;
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (!std::filesystem::exists(path)) return kept;
  std::ifstream in(path);
  const json g = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!g.is_object()) OLMO2_THROW(InputError, path, " is not a JSON object");
  if (const auto e = g.find("eos_token_id"); e != g.end() && !e->is_null()) {
    const json ids = e->is_array() ? *e : json::array({*e});
    if (!std::all_of(ids.begin(), ids.end(), is_id)) {
      OLMO2_THROW(InputError, path, ": field \"eos_token_id\" must be a token id or a list of token ids, got ",
                  e->dump());
    }
    kept["eos_token_id"] = ids;
  }
  struct Field {
    const char* name;
    bool (json::*type)() const noexcept;
    const char* what;
  };
  const Field fields[] = {{"temperature", &json::is_number, "a number"},
                          {"top_p", &json::is_number, "a number"},
                          {"top_k", &json::is_number_integer, "an integer"},
                          {"min_p", &json::is_number, "a number"},
                          {"repetition_penalty", &json::is_number, "a number"},
                          {"max_new_tokens", &json::is_number_integer, "an integer"},
                          {"do_sample", &json::is_boolean, "true or false"}};
  for (const Field& f : fields) {
    const auto it = g.find(f.name);
    if (it == g.end() || it->is_null()) continue;
    if (!((*it).*f.type)()) {
      OLMO2_THROW(InputError, path, ": field \"", f.name, "\" must be ", f.what, ", got ", it->dump());
    }
    kept[f.name] = *it;
  }
  return kept;
}

json checkpoint_generation_config(const ModelConfig& c, const json& kept) {
  json g = {{"_from_model_config", true}};
  std::vector<int64_t> eos = c.eos_token_ids;
  if (const auto e = kept.find("eos_token_id"); e != kept.end()) {
    for (const json& id : *e) {
      if (std::find(eos.begin(), eos.end(), id.get<int64_t>()) == eos.end()) eos.push_back(id.get<int64_t>());
    }
  }
  if (eos.size() == 1) {
    g["eos_token_id"] = eos[0];
  } else if (!eos.empty()) {
    g["eos_token_id"] = eos;
  }
  if (c.pad_token_id) g["pad_token_id"] = *c.pad_token_id;
  if (c.bos_token_id) g["bos_token_id"] = *c.bos_token_id;
  for (const auto& [k, v] : kept.items()) {
    if (k != "eos_token_id") g[k] = v;
  }
  return g;
}

}  // namespace olmo2
