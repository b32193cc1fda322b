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

}  // namespace olmo2::structured::detail

namespace olmo2::structured {

std::string regex_to_grammar(const std::string& pattern) {
  detail::RuleTable rules;
  return rules.text(detail::regex_expression(pattern, {}, ""));
}

}  // namespace olmo2::structured
