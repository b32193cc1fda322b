// Grammar text writing helpers (grammar_writer.h; docs/architecture.md §8).
#include "runtime/structured/grammar_writer.h"

#include <algorithm>
#include <cstdio>

namespace olmo2::structured::detail {

namespace {
constexpr char32_t kMaxCodePoint = 0x10FFFF;

/// One code point inside a class: ASCII printable as itself (class syntax characters
/// escaped), anything else as \xHH, \uHHHH or \UHHHHHHHH.
std::string class_char(char32_t c) {
  char buf[16];
  if (c == '\\' || c == ']' || c == '[' || c == '-' || c == '^' || c == '"') return std::string("\\") + char(c);
  if (c >= 0x20 && c < 0x7F) return std::string(1, char(c));
  if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(c));
  else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(c));
  else std::snprintf(buf, sizeof buf, "\\U%08X", unsigned(c));
  return buf;
}
}  // namespace

CodeRanges normalize(CodeRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges out;
  for (const auto& [lo, hi] : ranges) {
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1) out.back().second = std::max(out.back().second, hi);
    else out.emplace_back(lo, hi);
  }
  return out;
}

CodeRanges complement(const CodeRanges& ranges) {
  CodeRanges out;
  char32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

CodeRanges intersect(const CodeRanges& a, const CodeRanges& b) {
  CodeRanges out;
  for (const auto& [alo, ahi] : a)
    for (const auto& [blo, bhi] : b) {
      const char32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  return normalize(std::move(out));
}

CodeRanges without_surrogates(const CodeRanges& ranges) {
  return intersect(ranges, {{0, 0xD7FF}, {0xE000, kMaxCodePoint}});
}

std::string utf8(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
  return out;
}

std::string literal(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (b < 0x20 || b == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(b));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string literal(char32_t c) { return literal(utf8(c)); }

std::string char_class(const CodeRanges& ranges) {
  // Surrogates cannot occur in UTF-8 text: a negated class need not list them.
  const CodeRanges outside = without_surrogates(complement(ranges));
  const bool negate = !outside.empty() && outside.size() < ranges.size();
  std::string out = negate ? "[^" : "[";
  for (const auto& [lo, hi] : negate ? outside : ranges) {
    out += class_char(lo);
    if (hi > lo) {
      if (hi > lo + 1) out += '-';
      out += class_char(hi);
    }
  }
  return out + "]";
}

std::string RuleTable::fresh(const std::string& hint) {
  std::string base;
  for (const char c : hint) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) base += c;
    else if (c >= 'A' && c <= 'Z') base += char(c - 'A' + 'a');
    else if (!base.empty() && base.back() != '-') base += '-';
  }
  while (!base.empty() && base.back() == '-') base.pop_back();
  if (base.size() > 40) base.resize(40);
  if (base.empty() || base == "root" || (base[0] >= '0' && base[0] <= '9')) base = "r-" + base;
  const int n = used_[base]++;
  return n == 0 ? base : base + "-" + std::to_string(n);
}

std::string RuleTable::add(const std::string& hint, const std::string& body) {
  if (const auto it = by_body_.find(body); it != by_body_.end()) return it->second;
  const std::string name = fresh(hint);
  rules_.emplace_back(name, body);
  by_body_.emplace(body, name);
  return name;
}

std::string RuleTable::reserve(const std::string& hint) {
  const std::string name = fresh(hint);
  rules_.emplace_back(name, "");
  return name;
}

void RuleTable::define(const std::string& name, const std::string& body) {
  for (auto& [n, b] : rules_)
    if (n == name) b = body;
}

std::string RuleTable::text(const std::string& root_body) const {
  std::string out = "root ::= " + root_body + "\n";
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  return out;
}

}  // namespace olmo2::structured::detail
