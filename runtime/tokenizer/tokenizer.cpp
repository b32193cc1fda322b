#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/tokenizer/utf8.h"

namespace olmo2 {

namespace {

using nlohmann::json;

/// GPT-2's byte ↔ printable-character map used by the ByteLevel pre-tokenizer: bytes
/// 33–126, 161–172 and 174–255 stand for themselves, the other 68 for U+0100 onwards.
std::vector<uint32_t> byte_to_char() {
  std::vector<uint32_t> map(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    map[b] = printable ? b : next++;
  }
  return map;
}

/// Inverse of byte_to_char over a UTF-8 token string; false if a character is not in
/// the byte alphabet.
bool chars_to_bytes(const std::string& token, std::string* out) {
  static const std::vector<uint32_t> fwd = byte_to_char();
  static const std::vector<int> inv = [] {
    std::vector<int> v(512, -1);
    for (int b = 0; b < 256; ++b) v[fwd[b]] = b;
    return v;
  }();
  out->clear();
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  for (size_t i = 0; i < token.size();) {
    const size_t len = utf8_sequence_length(s + i, token.size() - i);
    if (!len) return false;
    const uint32_t cp = utf8_decode(s + i, len);
    if (cp >= inv.size() || inv[cp] < 0) return false;
    out->push_back(static_cast<char>(inv[cp]));
    i += len;
  }
  return true;
}

// GPT-2's pre-tokenizer regex, used when ByteLevel has use_regex: true.
const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!std::filesystem::is_regular_file(path) || !in) OLMO2_THROW(InputError, "cannot open tokenizer file ", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    OLMO2_THROW(InputError, path, ": not valid JSON: ", e.what());
  }
  auto refuse = [&](const std::string& what) { OLMO2_THROW(InputError, path, ": ", what); };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) refuse("no \"model\" object");
  const json& model = j["model"];
  if (model.value("type", "") != "BPE") refuse("model type " + model.value("type", std::string("?")) + " is not supported (byte-level BPE only)");
  if (model.value("byte_fallback", false)) refuse("BPE byte_fallback is not supported");
  if (!model.value("continuing_subword_prefix", json("")).is_null() && model.value("continuing_subword_prefix", json("")) != "") refuse("continuing_subword_prefix is not supported");
  if (!model.value("end_of_word_suffix", json("")).is_null() && model.value("end_of_word_suffix", json("")) != "") refuse("end_of_word_suffix is not supported");
  if (j.contains("normalizer") && !j["normalizer"].is_null()) refuse("normalizers are not supported (byte-level BPE has none)");

  Tokenizer t;
  // Pre-tokenizer: Sequence[Split(regex, invert), ByteLevel(use_regex false)] as dolma2,
  // or a lone ByteLevel (GPT-2 regex when use_regex).
  std::vector<json> steps;
  const json& pre = j.value("pre_tokenizer", json());
  if (pre.is_object() && pre.value("type", "") == "Sequence") {
    for (const json& s : pre.value("pretokenizers", json::array())) steps.push_back(s);
  } else if (pre.is_object()) {
    steps.push_back(pre);
  }
  bool byte_level = false;
  for (const json& s : steps) {
    const std::string type = s.value("type", "");
    if (type == "Split") {
      if (!s.contains("pattern") || !s["pattern"].contains("Regex")) refuse("Split pre-tokenizer without a Regex pattern");
      if (!s.value("invert", false) || s.value("behavior", "") != "Removed") refuse("only Split with behavior Removed and invert true is supported");
      t.pretokenizers_.push_back(std::make_unique<Pretokenizer>(s["pattern"]["Regex"].get<std::string>()));
    } else if (type == "ByteLevel") {
      byte_level = true;
      t.add_prefix_space_ = s.value("add_prefix_space", false);
      if (s.value("use_regex", true)) t.pretokenizers_.push_back(std::make_unique<Pretokenizer>(kGpt2Pattern));
    } else {
      refuse("pre-tokenizer " + type + " is not supported");
    }
  }
  if (!byte_level) refuse("no ByteLevel pre-tokenizer: only byte-level BPE is supported");

  // Vocabulary in the byte alphabet → raw bytes.
  const json& vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) refuse("model has no vocab object");
  std::vector<std::string> bytes;
  std::string raw;
  for (const auto& [token, idv] : vocab.items()) {
    if (!idv.is_number_unsigned() || idv.get<uint64_t>() > 10'000'000) refuse("vocab id of \"" + token + "\" is not a valid id");
    const size_t id = idv.get<size_t>();
    if (id >= bytes.size()) bytes.resize(id + 1);
    bytes[id] = chars_to_bytes(token, &raw) ? raw : token;
  }
  std::vector<std::pair<std::string, std::string>> merges;
  for (const json& m : model.value("merges", json::array())) {
    std::string l, r;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) refuse("merge \"" + s + "\" has no space");
      l = s.substr(0, sp), r = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      l = m[0].get<std::string>(), r = m[1].get<std::string>();
    } else {
      refuse("malformed merge " + m.dump());
    }
    std::string lb, rb;
    if (!chars_to_bytes(l, &lb) || !chars_to_bytes(r, &rb)) refuse("merge of tokens outside the byte alphabet");
    merges.emplace_back(std::move(lb), std::move(rb));
  }
  // Added tokens: whole strings with their own ids (possibly past the vocab).
  for (const json& a : j.value("added_tokens", json::array())) {
    const int32_t id = a.value("id", -1);
    const std::string content = a.value("content", "");
    if (id < 0 || content.empty()) refuse("malformed added token " + a.dump());
    if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false)) {
      refuse("added token " + content + " uses lstrip/rstrip/single_word, which is not supported");
    }
    if (static_cast<size_t>(id) >= bytes.size()) bytes.resize(static_cast<size_t>(id) + 1);
    bytes[static_cast<size_t>(id)] = content;
    t.added_.push_back({content, id, a.value("special", false)});
  }
  t.bpe_ = Bpe(std::move(bytes), merges, model.value("ignore_merges", false));
  t.special_.assign(t.bpe_.size(), false);
  for (const Added& a : t.added_) t.special_[static_cast<size_t>(a.id)] = a.special;
  return t;
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  std::vector<std::string_view> pieces{text}, next;
  for (const auto& p : pretokenizers_) {
    next.clear();
    for (std::string_view piece : pieces) p->split(piece, next);
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) bpe_.encode(piece, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view input) const {
  const std::string text = utf8_repair(input);
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    // Leftmost added token from pos; the longest among those starting there.
    size_t best_at = std::string::npos;
    const Added* best = nullptr;
    for (const Added& a : added_) {
      const size_t at = text.find(a.content, pos);
      if (at == std::string::npos) continue;
      if (at < best_at || (at == best_at && a.content.size() > best->content.size())) best_at = at, best = &a;
    }
    if (!best) break;
    encode_plain(std::string_view(text).substr(pos, best_at - pos), out);
    out.push_back(best->id);
    pos = best_at + best->content.size();
  }
  encode_plain(std::string_view(text).substr(pos), out);
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    OLMO2_THROW(InputError, "token id ", id, " is outside the tokenizer vocabulary [0, ", vocab_size(), ")");
  }
  return bpe_.bytes(id);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)];
}

bool Tokenizer::is_added(int32_t id) const {
  return std::any_of(added_.begin(), added_.end(), [id](const Added& a) { return a.id == id; });
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view text) const {
  for (const Added& a : added_) {
    if (a.content == text) return a.id;
  }
  const int32_t id = bpe_.find(text);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    const std::string& b = token_bytes(id);
    if (!(skip_special && is_special(id))) bytes += b;
  }
  return utf8_repair(bytes);
}

std::string StreamDecoder::push(int32_t id) {
  const std::string& b = tok_.token_bytes(id);
  if (!(skip_special_ && tok_.is_special(id))) pending_ += b;
  const size_t k = utf8_complete_prefix(pending_);
  std::string out = utf8_repair(std::string_view(pending_).substr(0, k));
  pending_.erase(0, k);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_repair(pending_);
  pending_.clear();
  return out;
}

}  // namespace olmo2
