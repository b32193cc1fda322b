#include "runtime/tokenizer/tokenize_manifest.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace olmo2 {

using nlohmann::json;

std::optional<TokenizeManifest> read_tokenize_manifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kTokenizeManifest).string();
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::ifstream in(path);
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) OLMO2_THROW(InputError, path, " is not a JSON object");
  const auto eos = j.find("eos_id");
  if (eos == j.end() || !eos->is_number_integer() || eos->get<int64_t>() < 0) {
    OLMO2_THROW(InputError, path, ": \"eos_id\" must be a token id (an integer ≥ 0), got ",
                eos == j.end() ? std::string("nothing") : eos->dump());
  }
  auto text = [&](const char* field) {
    const auto it = j.find(field);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  return TokenizeManifest{eos->get<int64_t>(), text("eos_token"), text("tokenizer"), text("tokenizer_sha256")};
}

void write_tokenize_manifest(const std::string& dir, const TokenizeManifest& m) {
  const std::string path = (std::filesystem::path(dir) / kTokenizeManifest).string();
  const std::string tmp = path + ".tmp";
  const std::string text = json{{"eos_id", m.eos_id}, {"eos_token", m.eos_token}, {"tokenizer", m.tokenizer},
                                {"tokenizer_sha256", m.tokenizer_sha256}}
                               .dump(2, ' ', false, json::error_handler_t::replace) +
                           "\n";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      OLMO2_THROW(InputError, "cannot write ", tmp, ": ", std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    OLMO2_THROW(InputError, "cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

}  // namespace olmo2
