#include "runtime/io/checkpoint_files.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/io/file_checksum.h"

namespace olmo2 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr char kStateJson[] = "training_state.json";

bool is_hex32(const std::string& s) {
  return s.size() == 32 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// A name that stays inside the directory: no separator, not "." or "..".
bool is_plain_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos && s.find('\0') == std::string::npos;
}
}  // namespace

FileListing read_file_listing(const std::string& dir) {
  FileListing out;
  const std::string path = (fs::path(dir) / kStateJson).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  out.is_checkpoint = true;
  std::ifstream in(path, std::ios::binary);
  if (!in) OLMO2_THROW(InputError, "cannot read ", path, ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    OLMO2_THROW(InputError, path, " is not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("files")) return out;
  const json& files = j.at("files");
  if (!files.is_object()) OLMO2_THROW(InputError, path, ": \"files\" is not an object");
  out.has_checksums = true;
  for (const auto& [name, entry] : files.items()) {
    const auto bytes = entry.is_object() ? entry.find("bytes") : entry.end();
    const auto hash = entry.is_object() ? entry.find("xxh3_128") : entry.end();
    if (!is_plain_name(name) || bytes == entry.end() || !bytes->is_number_unsigned() || hash == entry.end() ||
        !hash->is_string() || !is_hex32(hash->get<std::string>())) {
      OLMO2_THROW(InputError, path, ": \"files\" entry ", json(name).dump(), " is ", entry.dump(),
                  "; expected {\"bytes\": n, \"xxh3_128\": \"32 hex digits\"} for a file of the directory");
    }
    out.files.push_back({name, bytes->get<uint64_t>(), hash->get<std::string>()});
  }
  return out;
}

std::vector<std::string> files_a_loader_reads(const std::string& dir) {
  std::vector<std::string> out = {"config.json"};
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kStateJson, ec)) out.push_back("training_state.safetensors");
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::exists(index, ec)) {
    out.push_back("model.safetensors");
    return out;
  }
  out.push_back(index.filename().string());
  std::ifstream in(index, std::ios::binary);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    OLMO2_THROW(InputError, index.string(), " is not valid JSON: ", e.what());
  }
  const auto map = j.is_object() ? j.find("weight_map") : j.end();
  if (map == j.end() || !map->is_object()) OLMO2_THROW(InputError, index.string(), " has no \"weight_map\" object");
  std::vector<std::string> shards;
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string() || !is_plain_name(file.get<std::string>())) {
      OLMO2_THROW(InputError, index.string(), ": tensor ", tensor, " maps to ", file.dump(), ", not a file name");
    }
    shards.push_back(file.get<std::string>());
  }
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  out.insert(out.end(), shards.begin(), shards.end());
  return out;
}

void verify_listed_files(const std::string& dir, const FileListing& listing, const VerifyShare& share) {
  if (listing.has_checksums) {
    // A file the loaders read but the list leaves out would be used unchecked: a list
    // that was edited, or emptied, does not switch verification off.
    for (const std::string& needed : files_a_loader_reads(dir)) {
      const bool listed = std::any_of(listing.files.begin(), listing.files.end(),
                                      [&](const ListedFile& f) { return f.name == needed; });
      if (!listed) {
        OLMO2_THROW(InputError, needed, " is not in training_state.json's \"files\" (",
                    listing.files.size(), " listed): the checkpoint's list of checksums was edited or is incomplete");
      }
    }
  }
  for (size_t i = 0; i < listing.files.size(); ++i) {
    if (!share.mine(i)) continue;
    const ListedFile& f = listing.files[i];
    // generation_config.json and tokenizer_config.json are the user's to edit (an
    // end-of-turn stop id, sampling defaults, a chat template) and are validated whenever
    // they are read: listed, never verified (docs/architecture.md §7 "Checkpoint integrity").
    if (f.name == "generation_config.json" || f.name == "tokenizer_config.json") continue;
    const std::string path = (fs::path(dir) / f.name).string();
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      OLMO2_THROW(InputError, f.name, " is missing (training_state.json lists it: ", f.bytes, " bytes)");
    }
    const FileChecksum found = checksum_file(path);
    if (found.bytes != f.bytes || found.xxh3_128 != f.xxh3_128) {
      OLMO2_THROW(InputError, f.name, ": expected ", f.bytes, " bytes with xxh3_128 ", f.xxh3_128, ", found ",
                  found.bytes, " bytes", found.bytes < f.bytes ? " (truncated)" : "", " with xxh3_128 ",
                  found.xxh3_128);
    }
  }
}

void verify_model_directory(const std::string& dir, const VerifyShare& share, std::ostream* warn) {
  try {
    const FileListing listing = read_file_listing(dir);
    if (listing.is_checkpoint && !listing.has_checksums && warn) {
      *warn << "warning: " << (fs::path(dir) / kStateJson).string()
            << " lists no checksums (a checkpoint written before they existed): its files are not verified\n";
    }
    verify_listed_files(dir, listing, share);
  } catch (const InputError& e) {
    OLMO2_THROW(InputError, "--model ", dir, ": ", e.what());
  }
}

}  // namespace olmo2
