// Regex syntax tree → grammar text (constraint.h regex_to_grammar; regex_compile.h;
// docs/architecture.md §8, "Structured outputs"). The tree comes from regex_parse.cpp.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "runtime/structured/constraint.h"
#include "runtime/structured/regex_ast.h"
#include "runtime/structured/regex_compile.h"

namespace olmo2::structured::detail {

namespace {

// Code points of `set` as a grammar expression, in JSON string encoding when asked.
std::string emit_chars(const CodeRanges& all, bool json_content) {
  const CodeRanges set = without_surrogates(all);
  std::vector<std::string> alts;
  CodeRanges plain = set;
  if (json_content) {
    plain = intersect(set, complement(normalize({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}})));
    for (const auto& [lo, hi] : intersect(set, normalize({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}})))
      for (char32_t c = lo; c <= hi; ++c) {
        static const char* const kShort[] = {"b", "t", "n", nullptr, "f", "r"};
        char buf[8];
        if (c == '"' || c == '\\') alts.push_back(literal(std::string("\\") + char(c)));
        else if (c >= 8 && c <= 13 && kShort[c - 8]) alts.push_back(literal(std::string("\\") + kShort[c - 8]));
        else std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c)), alts.push_back(literal(std::string(buf)));
      }
  }
  if (!plain.empty())
    alts.insert(alts.begin(), plain.size() == 1 && plain[0].first == plain[0].second ? literal(plain[0].first)
                                                                                       : char_class(plain));
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

bool nullable(const Node& n) {
  switch (n.kind) {
    case Node::Kind::Chars: return false;
    case Node::Kind::Concat: return std::all_of(n.kids.begin(), n.kids.end(), nullable);
    case Node::Kind::Alt: return std::any_of(n.kids.begin(), n.kids.end(), nullable);
    case Node::Kind::Repeat: return n.min == 0 || nullable(n.kids[0]);
  }
  return false;
}

// The language of `n` without the empty string (none when that leaves nothing): the
// grammar refuses `x*` where x can be empty (left recursion), so x* is written
// (x without "")*, the same language.
std::optional<Node> non_empty(const Node& n) {
  if (!nullable(n)) return n;
  Node alt;
  alt.kind = Node::Kind::Alt;
  if (n.kind == Node::Kind::Concat) {  // every part can be empty: the first non-empty one
    for (size_t i = 0; i < n.kids.size(); ++i)
      if (auto first = non_empty(n.kids[i])) {
        Node seq;
        seq.kids.push_back(std::move(*first));
        seq.kids.insert(seq.kids.end(), n.kids.begin() + long(i) + 1, n.kids.end());
        alt.kids.push_back(std::move(seq));
      }
  } else if (n.kind == Node::Kind::Alt) {
    for (const Node& k : n.kids)
      if (auto e = non_empty(k)) alt.kids.push_back(std::move(*e));
  } else {  // Repeat: 1 to max non-empty pieces
    auto piece = non_empty(n.kids[0]);
    if (!piece || n.max == 0) return std::nullopt;
    Node rep;
    rep.kind = Node::Kind::Repeat;
    rep.min = 1;
    rep.max = n.max;
    rep.kids.push_back(std::move(*piece));
    return rep;
  }
  if (alt.kids.empty()) return std::nullopt;
  return alt;
}

// "" for the empty language's only string.
std::string emit(const Node& n, bool json_content) {
  switch (n.kind) {
    case Node::Kind::Chars: return emit_chars(n.set, json_content);
    case Node::Kind::Concat: {
      std::string out;
      for (const Node& k : n.kids) {
        const std::string e = emit(k, json_content);
        if (!e.empty()) out += (out.empty() ? "" : " ") + e;
      }
      return out;
    }
    case Node::Kind::Alt: {
      std::vector<std::string> parts;
      bool empty = false;
      for (const Node& k : n.kids) {
        const std::string e = emit(k, json_content);
        if (e.empty()) empty = true;
        else parts.push_back(e);
      }
      if (parts.empty()) return "";
      std::string out = "(";
      for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
      return out + (empty ? ")?" : ")");
    }
    case Node::Kind::Repeat: {
      if (n.max == -1 && nullable(n.kids[0])) {
        auto piece = non_empty(n.kids[0]);
        if (!piece) return "";
        Node star = n;
        star.min = 0;
        star.kids[0] = std::move(*piece);
        return emit(star, json_content);
      }
      const std::string e = emit(n.kids[0], json_content);
      if (e.empty() || n.max == 0) return "";
      const std::string body = "(" + e + ")";
      if (n.min == 0 && n.max == 1) return body + "?";
      if (n.min == 0 && n.max == -1) return body + "*";
      if (n.min == 1 && n.max == -1) return body + "+";
      if (n.min == 1 && n.max == 1) return body;
      if (n.max == -1) return body + "{" + std::to_string(n.min) + ",}";
      if (n.min == n.max) return body + "{" + std::to_string(n.min) + "}";
      return body + "{" + std::to_string(n.min) + "," + std::to_string(n.max) + "}";
    }
  }
  return "";
}

}  // namespace

std::string regex_expression(const std::string& pattern, const RegexMode& mode, const std::string& pointer) {
  std::vector<std::string> alts;
  bool any_empty = false;
  for (const auto& alt : parse_regex(pattern, pointer)) {
    std::string e = emit(alt.node, mode.json_content);
    if (mode.search) {
      const std::string pad = "(" + mode.any_char + ")*";
      if (!alt.start) e = e.empty() ? pad : pad + " " + e;
      if (!alt.end && !(e == pad)) e = e.empty() ? pad : e + " " + pad;
    }
    if (e.empty()) any_empty = true;
    else alts.push_back(e);
  }
  if (alts.empty()) return "\"\"";
  if (alts.size() == 1 && !any_empty) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + (any_empty ? ")?" : ")");
}

namespace {

// Fewest and most code points of the strings of `n` (most −1: unbounded).
std::pair<long long, long long> length_range(const Node& n) {
  switch (n.kind) {
    case Node::Kind::Chars: return {1, 1};
    case Node::Kind::Concat: {
      long long lo = 0, hi = 0;
      for (const Node& k : n.kids) {
        const auto [a, b] = length_range(k);
        lo += a;
        hi = hi == -1 || b == -1 ? -1 : hi + b;
      }
      return {lo, hi};
    }
    case Node::Kind::Alt: {
      long long lo = -1, hi = 0;
      for (const Node& k : n.kids) {
        const auto [a, b] = length_range(k);
        lo = lo == -1 ? a : std::min(lo, a);
        hi = hi == -1 || b == -1 ? -1 : std::max(hi, b);
      }
      return {std::max(lo, 0LL), hi};
    }
    case Node::Kind::Repeat: {
      const auto [a, b] = length_range(n.kids[0]);
      if (b == 0) return {0, 0};
      return {a * n.min, n.max == -1 || b == -1 ? -1 : b * n.max};
    }
  }
  return {0, -1};
}

[[noreturn]] void pattern_fail(const std::string& pointer, const std::string& why) {
  throw ConstraintError("schema " + pointer + ": " + why, pointer, __FILE__, __LINE__);
}

}  // namespace

std::string regex_expression_bounded(const std::string& pattern, const RegexMode& mode, const std::string& pointer,
                                     long long min_length, long long max_length) {
  auto alts = parse_regex(pattern, pointer);
  if (alts.size() != 1 || !alts[0].start || !alts[0].end)
    pattern_fail(pointer, "pattern with minLength or maxLength is supported only when anchored (^...$) without top-level |");
  Node node = std::move(alts[0].node);  // a Concat
  const auto [lo, hi] = length_range(node);
  auto fits = [&](long long a, long long b) { return a >= min_length && (max_length == -1 || (b != -1 && b <= max_length)); };
  if (!fits(lo, hi)) {
    // One repeated character class among fixed-length parts: its count takes the bounds.
    long long fixed = 0;
    Node* rep = nullptr;
    for (Node& k : node.kids) {
      const auto [a, b] = length_range(k);
      if (a == b) fixed += a;
      else if (!rep && k.kind == Node::Kind::Repeat && k.kids[0].kind == Node::Kind::Chars) rep = &k;
      else pattern_fail(pointer, "pattern with minLength or maxLength is supported when the pattern's length varies "
                                 "in one repeated character class only");
    }
    if (!rep) pattern_fail(pointer, "unsatisfiable: the pattern's " + std::to_string(lo) +
                                        " characters do not fit minLength/maxLength");
    const long long new_min = std::max<long long>(rep->min, min_length - fixed);
    long long new_max = rep->max;
    if (max_length != -1) new_max = rep->max == -1 ? max_length - fixed : std::min<long long>(rep->max, max_length - fixed);
    if (new_max != -1 && new_min > new_max)
      pattern_fail(pointer, "unsatisfiable: pattern and minLength/maxLength admit no string");
    rep->min = static_cast<int>(new_min);
    rep->max = static_cast<int>(new_max);
  }
  const std::string e = emit(node, mode.json_content);
  return e.empty() ? "\"\"" : e;
}

}  // namespace olmo2::structured::detail

namespace olmo2::structured {

std::string regex_to_grammar(const std::string& pattern) {
  detail::RuleTable rules;
  return rules.text(detail::regex_expression(pattern, {}, ""));
}

}  // namespace olmo2::structured
