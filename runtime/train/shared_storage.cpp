#include "runtime/train/shared_storage.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "parallel/agreement.h"
#include "parallel/node_ranks.h"
#include "parallel/string_gather.h"
#include "runtime/io/file_checksum.h"

namespace olmo2 {

namespace fs = std::filesystem;

namespace {

/// 32 hex digits from std::random_device: a probe no earlier run or other job left.
std::string random_token() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 4; ++i) {
    uint32_t word = rd();
    for (int j = 0; j < 8; ++j, word >>= 4) token += hex[word & 15];
  }
  return token;
}

/// "rank 2" or "ranks 2, 3".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

/// "ranks 2, 3 on nodeb and rank 5 on nodec" for the sights `pick` selects, hosts in
/// the order of their first rank; "" when none is selected.
template <typename Pick>
std::string ranks_by_host(const std::vector<StorageSight>& sights, Pick pick) {
  std::vector<std::pair<std::string, std::vector<int>>> hosts;
  for (const StorageSight& s : sights) {
    if (!pick(s)) continue;
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == s.host; });
    if (it == hosts.end()) it = hosts.insert(hosts.end(), {s.host, {}});
    it->second.push_back(s.rank);
  }
  std::string out;
  for (size_t i = 0; i < hosts.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == hosts.size() ? " and " : ", ") + rank_list(hosts[i].second) + " on " +
           hosts[i].first;
  }
  return out;
}

/// Rank 0: creates `dir` and returns the directories that did not exist, deepest first.
std::vector<fs::path> create_directory(const fs::path& dir) {
  std::vector<fs::path> missing;
  for (fs::path p = dir; !p.empty() && !fs::exists(p); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) OLMO2_THROW(InputError, "--save-dir ", dir.string(), ": cannot create the directory: ", ec.message());
  return missing;
}

/// Removes what create_directory made, where it is empty again (errors ignored: the
/// probe leaves no trace when it can, and never fails the run for it).
void remove_created(const std::vector<fs::path>& created) {
  std::error_code ec;
  for (const fs::path& p : created) fs::remove(p, ec);
}

/// Why this rank cannot read `token` back from `probe` ("" when it can).
std::string read_probe(const std::string& probe, const std::string& token) {
  std::ifstream in(probe, std::ios::binary);
  if (!in) return "cannot open " + probe + ": " + std::strerror(errno);
  std::string got(64, '\0');
  in.read(got.data(), static_cast<std::streamsize>(got.size()));
  got.resize(static_cast<size_t>(in.gcount()));
  if (got != token) return probe + " holds \"" + got + "\", not rank 0's token \"" + token + "\"";
  return "";
}

/// Why this rank's resume_dir/training_state.json is not rank 0's ("" when it is).
std::string compare_checkpoint(const std::string& resume_dir, const std::string& root_digest) {
  const std::string file = resume_dir + "/training_state.json";
  try {
    const std::string mine = checksum_file(file).xxh3_128;
    if (mine == root_digest) return "";
    return file + " has XXH3-128 " + mine + ", rank 0's has " + root_digest;
  } catch (const InputError& e) {
    return e.what();
  }
}

/// Every rank's sight, gathered on every rank (one JSON string per rank).
std::vector<StorageSight> gather_sights(parallel::Communicator& world, const StorageSight& mine) {
  const std::string text = nlohmann::json{{"host", mine.host}, {"probe", mine.probe}, {"checkpoint", mine.checkpoint}}.dump();
  const std::vector<std::string> all = parallel::all_gather_strings(world, text);
  std::vector<StorageSight> sights;
  for (int r = 0; r < world.size(); ++r) {
    const nlohmann::json j = nlohmann::json::parse(all[static_cast<size_t>(r)]);
    sights.push_back({r, j.at("host"), j.at("probe"), j.at("checkpoint")});
  }
  return sights;
}

}  // namespace

std::string storage_failure_message(const std::vector<StorageSight>& sights, const std::string& save_dir,
                                    const std::string& resume_dir) {
  // One clause per kind of failure: who (grouped by host), the verb agreeing with them,
  // what they do not see, and the first such rank's reason.
  const auto clause = [&](auto pick, const std::string& what) -> std::string {
    const std::string who = ranks_by_host(sights, pick);
    if (who.empty()) return "";
    const auto first = std::find_if(sights.begin(), sights.end(), pick);
    const bool one = std::count_if(sights.begin(), sights.end(), pick) == 1;
    return who + (one ? " does" : " do") + " not see " + what + ": rank " + std::to_string(first->rank) + ": " +
           (first->probe.empty() ? first->checkpoint : first->probe);
  };
  std::string message = clause([](const StorageSight& s) { return !s.probe.empty(); },
                               "--save-dir " + save_dir + " (it is not shared storage)");
  const std::string other = clause([](const StorageSight& s) { return s.probe.empty() && !s.checkpoint.empty(); },
                                   "rank 0's checkpoint " + resume_dir + " (--save-dir " + save_dir +
                                       " is not the same storage on every node)");
  if (!other.empty()) message += (message.empty() ? "" : "; ") + other;
  return message;
}

void check_shared_storage(parallel::Communicator* world, const std::string& save_dir, const std::string& resume_dir) {
  if (save_dir.empty()) return;
  const bool root = !world || world->rank() == 0;
  // 1. Rank 0 creates the directory and writes the probe; its failure stops every rank.
  std::string probe, token, digest;
  std::vector<fs::path> created;
  parallel::agree(world, [&] {
    if (!root) return;
    created = create_directory(save_dir);
    token = random_token();
    probe = save_dir + "/.olmo2-probe-" + token;
    std::ofstream out(probe, std::ios::binary);
    out << token;
    out.close();
    if (!out) {
      const std::string reason = std::strerror(errno);
      remove_created(created);
      OLMO2_THROW(InputError, "--save-dir ", save_dir, ": cannot write ", probe, ": ", reason);
    }
    if (!resume_dir.empty()) digest = checksum_file(resume_dir + "/training_state.json").xxh3_128;
  });
  if (!world || world->size() == 1) {  // one process: the probe only proves --save-dir writable
    std::error_code ec;
    fs::remove(probe, ec);
    remove_created(created);
    return;
  }
  for (std::string* s : {&probe, &token, &digest}) parallel::broadcast_string(*world, *s, 0);
  // 2. Every rank looks (the agree above is the barrier: the probe is complete).
  StorageSight mine{world->rank(), "", "", ""};
  try {
    mine.host = parallel::host_name();
  } catch (const Error&) {
    mine.host = "(unknown host)";
  }
  mine.probe = read_probe(probe, token);
  if (mine.probe.empty() && !resume_dir.empty()) mine.checkpoint = compare_checkpoint(resume_dir, digest);
  const std::vector<StorageSight> sights = gather_sights(*world, mine);
  // 3. Rank 0 cleans up; one message, thrown by every rank (AgreedError as is).
  std::string message;
  if (root) {
    std::error_code ec;
    fs::remove(probe, ec);
    remove_created(created);
    message = storage_failure_message(sights, save_dir, resume_dir);
  }
  parallel::broadcast_string(*world, message, 0);
  parallel::agree(world, [&] {
    if (!message.empty()) OLMO2_THROW(InputError, message);
  });
}

}  // namespace olmo2
