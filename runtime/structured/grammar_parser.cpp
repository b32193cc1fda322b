// Grammar text → rules (docs/architecture.md §8, "Structured outputs"): the GBNF subset
// described in constraint.h, syntax only; grammar_compile.cpp lowers and checks it.
#include <cctype>
#include <string>

#include "runtime/structured/grammar_impl.h"

namespace olmo2::structured {
namespace {

/// Repetition counts above this are refused (the expansion would be too large).
constexpr int64_t kMaxRepeat = 100000;
/// Deeper parenthesis nesting is refused (the parser recurses per level).
constexpr int kMaxNesting = 1000;

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  std::vector<AstRule> parse() {
    std::vector<AstRule> rules;
    skip_space(true);
    while (i_ < s_.size()) {
      AstRule rule;
      rule.line = line_;
      rule.name = parse_name();
      if (rule.name.empty()) fail("expected a rule name");
      rule_ = rule.name;
      skip_space(false);
      if (s_.compare(i_, 3, "::=") != 0) fail("expected '::=' after the rule name");
      i_ += 3;
      skip_space(false);
      rule.alternatives = parse_alternatives(0);
      rules.push_back(std::move(rule));
      rule_.clear();
      skip_space(true);
    }
    return rules;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    const std::string where = "grammar line " + std::to_string(line_);
    OLMO2_CONSTRAINT_ERROR(where, where, rule_.empty() ? "" : ", rule '" + rule_ + "'", ": ", why);
  }

  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[i_]; }

  /// Skips blanks and comments; newlines too when `newlines` (else stops at one).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        while (!at_end() && s_[i_] != '\n') ++i_;
      } else if (c == '\n' && newlines) {
        ++i_;
        ++line_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (!at_end() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' || s_[i_] == '-')) ++i_;
    return s_.substr(start, i_ - start);
  }

  /// A newline ends the rule unless inside parentheses (`depth` > 0) or the next line
  /// goes on with `|`.
  void skip_between(int depth) {
    skip_space(depth > 0);
    if (depth == 0 && peek() == '\n') {
      size_t j = i_ + 1;
      int lines = 1;
      while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t' || s_[j] == '\r' || s_[j] == '\n' || s_[j] == '#')) {
        if (s_[j] == '#') {  // a comment line between the alternatives
          while (j < s_.size() && s_[j] != '\n') ++j;
          continue;
        }
        lines += s_[j++] == '\n';
      }
      if (j < s_.size() && s_[j] == '|') {
        i_ = j;
        line_ += lines;
      }
    }
  }

  std::vector<std::vector<AstElement>> parse_alternatives(int depth) {
    std::vector<std::vector<AstElement>> alts;
    alts.push_back(parse_sequence(depth));
    while (peek() == '|') {
      ++i_;
      skip_space(true);
      alts.push_back(parse_sequence(depth));
    }
    return alts;
  }

  std::vector<AstElement> parse_sequence(int depth) {
    std::vector<AstElement> seq;
    while (true) {
      skip_between(depth);
      const char c = peek();
      if (at_end() || c == '\n' || c == '|' || c == ')') break;
      // The next rule's "name ::=" ends this one (when the previous line did not end it).
      if (depth == 0 && looks_like_rule_start()) fail("expected a newline before the next rule");
      AstElement e = parse_atom(depth);
      parse_postfix(e);
      seq.push_back(std::move(e));
    }
    if (depth > 0 && at_end()) fail("unclosed '('");
    if (depth == 0 && peek() == ')') fail("unmatched ')'");
    return seq;
  }

  bool looks_like_rule_start() const {
    size_t j = i_;
    while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_' || s_[j] == '-')) ++j;
    if (j == i_) return false;
    while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) ++j;
    return s_.compare(j, 3, "::=") == 0;
  }

  AstElement parse_atom(int depth) {
    AstElement e;
    const char c = peek();
    if (c == '"') {
      ++i_;
      e.kind = AstElement::Kind::Literal;
      while (true) {
        if (at_end() || peek() == '\n') fail("unterminated string literal");
        if (peek() == '"') break;
        if (peek() == '\\') {
          append_utf8(parse_escape(), e.text);
        } else {
          e.text.push_back(s_[i_++]);
        }
      }
      ++i_;
    } else if (c == '[') {
      ++i_;
      e.kind = AstElement::Kind::Class;
      if (peek() == '^') {
        e.negated = true;
        ++i_;
      }
      while (true) {
        if (at_end() || peek() == '\n') fail("unterminated character class");
        if (peek() == ']') break;
        const uint32_t lo = parse_class_char();
        uint32_t hi = lo;
        if (peek() == '-' && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
          ++i_;
          hi = parse_class_char();
          if (hi < lo) fail("character class range out of order");
        }
        e.ranges.emplace_back(lo, hi);
      }
      ++i_;
    } else if (c == '.') {
      ++i_;
      e.kind = AstElement::Kind::Class;
      e.negated = true;  // any code point
    } else if (c == '(') {
      if (depth >= kMaxNesting) fail("parentheses nested deeper than " + std::to_string(kMaxNesting));
      ++i_;
      skip_space(true);
      e.kind = AstElement::Kind::Group;
      e.alternatives = parse_alternatives(depth + 1);
      if (peek() != ')') fail("unclosed '('");
      ++i_;
    } else {
      e.kind = AstElement::Kind::Ref;
      e.text = parse_name();
      if (e.text.empty()) fail(std::string("unexpected character '") + c + "'");
    }
    return e;
  }

  void parse_postfix(AstElement& e) {
    const char c = peek();
    if (c == '*') {
      e.min = 0, e.max = -1, ++i_;
    } else if (c == '+') {
      e.min = 1, e.max = -1, ++i_;
    } else if (c == '?') {
      e.min = 0, e.max = 1, ++i_;
    } else if (c == '{') {
      ++i_;
      e.min = parse_count();
      e.max = e.min;
      if (peek() == ',') {
        ++i_;
        e.max = peek() == '}' ? -1 : parse_count();
      }
      if (peek() != '}') fail("expected '}' closing a repetition");
      ++i_;
      if (e.max >= 0 && e.max < e.min) fail("repetition {" + std::to_string(e.min) + "," + std::to_string(e.max) + "} has max < min");
    }
  }

  int64_t parse_count() {
    int64_t n = 0;
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a number in a repetition");
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      n = n * 10 + (s_[i_++] - '0');
      if (n > kMaxRepeat) fail("repetition count above " + std::to_string(kMaxRepeat));
    }
    return n;
  }

  uint32_t parse_class_char() {
    if (peek() == '\\') return parse_escape();
    return decode_utf8();
  }

  uint32_t decode_utf8() {
    const auto b0 = static_cast<unsigned char>(s_[i_]);
    int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > s_.size()) fail("ill-formed UTF-8 in a character class");
    uint32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s_[i_ + k]);
      if ((b & 0xC0) != 0x80) fail("ill-formed UTF-8 in a character class");
      cp = (cp << 6) | (b & 0x3F);
    }
    i_ += n;
    return cp;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const char h = peek();
      if (!std::isxdigit(static_cast<unsigned char>(h))) fail("expected " + std::to_string(digits) + " hex digits after an escape");
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      ++i_;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) fail("escape names no Unicode scalar value");
    return v;
  }

  uint32_t parse_escape() {
    ++i_;  // the backslash
    const char c = peek();
    ++i_;
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '"': case '\\': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(c);
      case 'x': return parse_hex(2);
      case 'u': return parse_hex(4);
      case 'U': return parse_hex(8);
      default: fail(std::string("unknown escape '\\") + c + "'");
    }
  }

  const std::string& s_;
  size_t i_ = 0;
  int line_ = 1;
  std::string rule_;
};

}  // namespace

std::vector<AstRule> parse_grammar_text(const std::string& text) { return Parser(text).parse(); }

}  // namespace olmo2::structured
