#include "launcher/job_options.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "runtime/io/file_checksum.h"

namespace olmo2 {

namespace po = boost::program_options;

namespace {

/// Options each rank may hold for itself (see job_options).
const std::set<std::string>& per_rank_options() {
  static const std::set<std::string> names = {"help",  "config", "threads", "metrics-host",   "port-file",
                                              "host",  "port",   "api-key", "activations-out", "output"};
  return names;
}

/// A value of the types the subcommands declare, as text that round-trips.
std::string value_text(const boost::any& v) {
  if (const auto* s = boost::any_cast<std::string>(&v)) return *s;
  if (const auto* b = boost::any_cast<bool>(&v)) return *b ? "true" : "false";
  if (const auto* i = boost::any_cast<int>(&v)) return std::to_string(*i);
  if (const auto* l = boost::any_cast<int64_t>(&v)) return std::to_string(*l);
  if (const auto* u = boost::any_cast<uint64_t>(&v)) return std::to_string(*u);
  if (const auto* d = boost::any_cast<double>(&v)) {  // the shortest text that reads back the same double
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, *d);
    return std::string(buf, r.ptr);
  }
  if (const auto* list = boost::any_cast<std::vector<std::string>>(&v)) {
    std::string out;
    for (const std::string& s : *list) out += (out.empty() ? "" : " ") + s;
    return out;
  }
  return "(a value of another type)";
}

/// "bytes B, xxh3 H" of a file, or "unreadable".
std::string file_identity(const std::string& path) {
  try {
    const FileChecksum c = checksum_file(path);
    return std::to_string(c.bytes) + " bytes, xxh3 " + c.xxh3_128;
  } catch (const std::exception&) {
    return "unreadable";
  }
}

/// What identifies the weights of a checkpoint folder without reading them all: the
/// checksum of training_state.json where there is one (it lists every file's checksum),
/// and for each *.safetensors file its size and the XXH3-128 of its first 1 MiB (the
/// header and the first tensors) and of 32 evenly spaced 64 KiB samples. Two checkpoints
/// of other seeds or other steps differ in every sample; a copy at another path agrees.
std::string weights_identity(const std::string& folder) {
  namespace fs = std::filesystem;
  std::string out;
  std::error_code ec;
  if (fs::exists(fs::path(folder) / "training_state.json", ec))
    out += "training_state.json " + file_identity((fs::path(folder) / "training_state.json").string()) + "; ";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(folder, ec))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::FILE* in = std::fopen(f.c_str(), "rb");
    const uint64_t size = fs::file_size(f, ec);
    if (in == nullptr || ec) {
      if (in) std::fclose(in);
      out += f.filename().string() + " unreadable; ";
      continue;
    }
    Xxh3Stream h;
    std::vector<char> buf(size_t{1} << 20);
    auto sample = [&](uint64_t at, size_t n) {
      n = static_cast<size_t>(std::min<uint64_t>(n, size - std::min(at, size)));
      if (n == 0 || std::fseek(in, static_cast<long>(at), SEEK_SET) != 0) return;
      h.update(buf.data(), std::fread(buf.data(), 1, n, in));
    };
    sample(0, buf.size());
    constexpr int kSamples = 32;
    for (int i = 1; i <= kSamples; ++i) sample(size / (kSamples + 1) * static_cast<uint64_t>(i), 64 * 1024);
    std::fclose(in);
    out += f.filename().string() + " " + std::to_string(size) + " bytes, sampled xxh3 " + h.hex() + "; ";
  }
  return out.empty() ? "no weights found" : out.substr(0, out.size() - 2);
}

/// The name of the folder `path` names ("step-00000010" for ".../step-00000010/").
std::string folder_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      out += s[i + 1] == 'n' ? '\n' : s[i + 1];
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::vector<JobOption> job_options(const po::variables_map& vm) {
  std::vector<JobOption> out;
  for (const auto& [name, entry] : vm) {
    if (per_rank_options().count(name) || entry.empty()) continue;
    const std::string text = value_text(entry.value());
    std::string value = text;
    if (name == "model-config" || name == "tokenizer" || name == "chat-template" || name == "prompts") {
      value = file_identity(text);
    } else if (name == "model") {
      value = "folder " + folder_name(text) + ", config.json " + file_identity(text + "/config.json") +
              ", generation_config.json " + file_identity(text + "/generation_config.json") + ", " +
              weights_identity(text);
    } else if (name == "resume") {
      value = text == "auto" ? text : "checkpoint " + folder_name(text);
    } else if (name == "data") {
      const auto* files = boost::any_cast<std::vector<std::string>>(&entry.value());
      value = std::to_string(files ? files->size() : 1) + " files";
    } else if (name == "save-dir" || name == "metrics-port") {
      value = "given";
    }
    out.push_back({name, value});
  }
  std::sort(out.begin(), out.end(), [](const JobOption& a, const JobOption& b) { return a.name < b.name; });
  return out;
}

std::string serialize_job_options(const std::vector<JobOption>& options) {
  std::string out;
  for (const JobOption& o : options) out += o.name + "=" + escape(o.value) + "\n";
  return out;
}

std::vector<JobOption> parse_job_options(const std::string& text) {
  std::vector<JobOption> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    out.push_back({line.substr(0, eq), unescape(line.substr(eq + 1))});
  }
  return out;
}

std::string first_difference(const std::vector<JobOption>& root, const std::vector<JobOption>& mine, int rank) {
  auto find = [](const std::vector<JobOption>& v, const std::string& name) -> const JobOption* {
    for (const JobOption& o : v) {
      if (o.name == name) return &o;
    }
    return nullptr;
  };
  std::set<std::string> names;
  for (const JobOption& o : root) names.insert(o.name);
  for (const JobOption& o : mine) names.insert(o.name);
  for (const std::string& name : names) {  // sorted: the first difference is the same on every rank
    const JobOption* a = find(root, name);
    const JobOption* b = find(mine, name);
    if (a && b && a->value == b->value) continue;
    auto said = [&](const JobOption* o) { return o ? "--" + name + " " + o->value : "no --" + name; };
    return "rank " + std::to_string(rank) + " has " + said(b) + ", rank 0 " + said(a);
  }
  return "";
}

}  // namespace olmo2
