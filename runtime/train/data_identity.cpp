#include "runtime/train/data_identity.h"

namespace olmo2 {

namespace {
std::string describe(const DataFileIdentity& f) {
  return f.path + " (" + std::to_string(f.tokens) + " tokens, xxh3 " + f.xxh3 + ")";
}

std::string paths(const std::vector<DataFileIdentity>& files) {
  std::string out;
  for (const DataFileIdentity& f : files) out += (out.empty() ? "" : ", ") + f.path;
  return out;
}

bool same_tokens(const DataFileIdentity& a, const DataFileIdentity& b) {
  return a.tokens == b.tokens && a.xxh3 == b.xxh3;
}
}  // namespace

uint64_t data_fingerprint(const std::vector<DataFileIdentity>& files) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  for (const DataFileIdentity& f : files) add(std::to_string(f.tokens) + ":" + f.xxh3 + ";");
  return h;
}

std::string data_difference(const std::vector<DataFileIdentity>& trained, const std::vector<DataFileIdentity>& now) {
  if (trained.size() != now.size()) {
    return "the checkpoint's run read " + std::to_string(trained.size()) + " files (" + paths(trained) +
           "), this run reads " + std::to_string(now.size()) + " (" + paths(now) + ")";
  }
  for (size_t i = 0; i < now.size(); ++i) {
    if (same_tokens(trained[i], now[i])) continue;
    for (size_t j = 0; j < trained.size(); ++j) {
      if (j != i && same_tokens(trained[j], now[i])) {
        return "file " + std::to_string(i + 1) + " of --data, " + now[i].path + ", was file " + std::to_string(j + 1) +
               " of the checkpoint's run (its order: " + paths(trained) + ")";
      }
    }
    return "file " + std::to_string(i + 1) + " of --data, " + describe(now[i]) + ", is not the checkpoint's file " +
           std::to_string(i + 1) + ", " + describe(trained[i]);
  }
  return "";
}

}  // namespace olmo2
