// ECMAScript regex subset → syntax tree (regex_ast.h; docs/architecture.md §8,
// "Structured outputs"): a recursive-descent parser over code points.
//
// Character classes take the meaning that holds under both ECMAScript and Python's `re`
// (the reference the tests and JSON Schema validators use): \d and \w are ASCII;
// \s is the whitespace both agree on; \D, \W and negated classes holding a shorthand
// match ASCII characters only; `.` excludes all ECMAScript line terminators.
#include <algorithm>
#include <cctype>
#include <optional>
#include <tuple>

#include "runtime/structured/constraint.h"
#include "runtime/structured/regex_ast.h"

namespace olmo2::structured::detail {

namespace {

const CodeRanges kDigit = {{'0', '9'}};
const CodeRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// Whitespace in both ECMAScript and Python (\ufeff is ECMAScript's only, \x1c-\x1f and
// \x85 Python's only).
const CodeRanges kSpace = {{'\t', '\r'}, {' ', ' '},   {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                           {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
const CodeRanges kSpaceEither = normalize({{'\t', '\r'}, {0x1C, ' '}, {0x85, 0x85}, {0xA0, 0xA0},
                                           {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                                           {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
const CodeRanges kAscii = {{0, 0x7F}};
const CodeRanges kAsciiSafe = {{0, 0x1B}, {0x20, 0x7F}};  // ASCII without \x1c-\x1f

class Parser {
 public:
  Parser(const std::string& pattern, std::string pointer) : pointer_(std::move(pointer)) { decode(pattern); }

  std::vector<RegexAlternative> parse_top() {
    std::vector<RegexAlternative> alts;
    while (true) {
      RegexAlternative alt;
      if (peek('^')) {
        ++pos_;
        alt.start = true;
      }
      alt.node = parse_concat(0, &alt.end);
      alts.push_back(std::move(alt));
      if (pos_ >= cps_.size()) break;
      if (cps_[pos_] == ')') fail("unmatched ')'");
      ++pos_;  // '|'
    }
    return alts;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw ConstraintError("regex offset " + std::to_string(pos_) + ": " + why,
                          pointer_ + (pointer_.empty() ? "" : " ") + "regex offset " + std::to_string(pos_),
                          __FILE__, __LINE__);
  }
  bool peek(char32_t c) const { return pos_ < cps_.size() && cps_[pos_] == c; }

  void decode(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
      const auto b = static_cast<unsigned char>(s[i]);
      const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + n > s.size()) fail("the pattern is not valid UTF-8");
      char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
      for (int k = 1; k < n; ++k) {
        const auto cb = static_cast<unsigned char>(s[i + k]);
        if ((cb & 0xC0) != 0x80) fail("the pattern is not valid UTF-8");
        c = (c << 6) | (cb & 0x3F);
      }
      cps_.push_back(c);
      i += n;
    }
  }

  // A sequence up to '|', ')' or the end. `end_anchor` non-null at the top level,
  // where a final '$' is accepted.
  Node parse_concat(int depth, bool* end_anchor) {
    if (depth > 100) fail("groups nested too deeply");
    Node seq;
    while (pos_ < cps_.size() && cps_[pos_] != '|' && cps_[pos_] != ')') {
      if (cps_[pos_] == '$') {
        if (end_anchor && (pos_ + 1 == cps_.size() || cps_[pos_ + 1] == '|')) {
          ++pos_;
          *end_anchor = true;
          break;
        }
        fail("'$' is accepted only at the end of the pattern");
      }
      if (cps_[pos_] == '^') fail("'^' is accepted only at the start of the pattern");
      Node atom = parse_atom(depth);
      parse_quantifier(atom);
      seq.kids.push_back(std::move(atom));
    }
    return seq;
  }

  std::optional<std::pair<int, int>> try_braces() {
    size_t p = pos_ + 1;
    auto number = [&](int& v) {
      const size_t s = p;
      long long n = 0;
      while (p < cps_.size() && cps_[p] >= '0' && cps_[p] <= '9') n = std::min(n * 10 + (cps_[p++] - '0'), 1LL << 30);
      v = int(n);
      return p > s;
    };
    int lo = 0, hi = 0;
    if (!number(lo)) {
      if (p < cps_.size() && cps_[p] == ',') fail("'{,n}' means different things in ECMAScript and Python");
      return std::nullopt;
    }
    hi = lo;
    if (p < cps_.size() && cps_[p] == ',') {
      ++p;
      if (!number(hi)) hi = -1;
    }
    if (p >= cps_.size() || cps_[p] != '}') return std::nullopt;
    pos_ = p + 1;
    return std::pair{lo, hi};
  }

  void parse_quantifier(Node& atom) {
    if (pos_ >= cps_.size()) return;
    const size_t at = pos_;
    int lo, hi;
    const char32_t c = cps_[pos_];
    if (c == '*') lo = 0, hi = -1, ++pos_;
    else if (c == '+') lo = 1, hi = -1, ++pos_;
    else if (c == '?') lo = 0, hi = 1, ++pos_;
    else if (c == '{') {
      const auto b = try_braces();
      if (!b) return;
      std::tie(lo, hi) = *b;
    } else {
      return;
    }
    if (hi != -1 && lo > hi) {
      pos_ = at;
      fail("quantifier {" + std::to_string(lo) + "," + std::to_string(hi) + "} has min > max");
    }
    if (lo > 10000 || hi > 10000) {
      pos_ = at;
      fail("quantifier bound above 10000");
    }
    if (peek('?')) ++pos_;  // lazy: the same language
    if (pos_ < cps_.size() && (cps_[pos_] == '*' || cps_[pos_] == '+' || cps_[pos_] == '?' ||
                               (cps_[pos_] == '{' && [&] { const size_t s = pos_; const bool q = try_braces().has_value(); pos_ = s; return q; }())))
      fail("nothing to repeat (a quantifier after a quantifier)");
    Node rep;
    rep.kind = Node::Kind::Repeat;
    rep.min = lo;
    rep.max = hi;
    rep.kids.push_back(std::move(atom));
    atom = std::move(rep);
  }

  static Node chars(CodeRanges set) {
    Node n;
    n.kind = Node::Kind::Chars;
    n.set = normalize(std::move(set));
    return n;
  }

  Node parse_atom(int depth) {
    const char32_t c = cps_[pos_];
    if (c == '(') {
      const size_t open = pos_++;
      if (peek('?')) {
        ++pos_;
        if (peek(':')) {
          ++pos_;
        } else if (peek('<') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != '=' && cps_[pos_ + 1] != '!') {
          while (pos_ < cps_.size() && cps_[pos_] != '>') ++pos_;
          if (pos_ >= cps_.size()) fail("unterminated group name");
          ++pos_;
        } else if (peek('=') || peek('!') || peek('<')) {
          pos_ = open;
          fail("lookaround assertions are not supported");
        } else {
          pos_ = open;
          fail("unsupported group syntax '(?'");
        }
      }
      Node alt;
      alt.kind = Node::Kind::Alt;
      while (true) {
        alt.kids.push_back(parse_concat(depth + 1, nullptr));
        if (pos_ >= cps_.size()) fail("missing ')'");
        if (cps_[pos_++] == ')') break;
      }
      return alt;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return chars(complement(normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})));
    }
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    if (c == '{' && [&] { const size_t s = pos_; const bool q = try_braces().has_value(); pos_ = s; return q; }())
      fail("nothing to repeat");
    if (c == '\\') {
      ++pos_;
      CodeRanges set;
      parse_escape(false, set);
      return chars(set);
    }
    ++pos_;
    return chars({{c, c}});
  }

  // After a backslash. Returns true when the escape was a shorthand class (\d …).
  bool parse_escape(bool in_class, CodeRanges& set) {
    if (pos_ >= cps_.size()) fail("pattern ends with '\\'");
    const size_t at = pos_ - 1;  // the backslash
    const char32_t c = cps_[pos_++];
    auto one = [&](char32_t v) {
      set.emplace_back(v, v);
      return false;
    };
    auto hex = [&](int digits) {
      char32_t v = 0;
      for (int k = 0; k < digits; ++k) {
        if (pos_ >= cps_.size() || cps_[pos_] > 0x7F || !std::isxdigit(int(cps_[pos_]))) fail("malformed hex escape");
        const char32_t d = cps_[pos_++];
        v = v * 16 + (d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
      }
      return v;
    };
    switch (c) {
      case 'd': set.insert(set.end(), kDigit.begin(), kDigit.end()); return true;
      case 'w': set.insert(set.end(), kWord.begin(), kWord.end()); return true;
      case 's': set.insert(set.end(), kSpace.begin(), kSpace.end()); return true;
      case 'D': { auto s = intersect(complement(kDigit), kAscii); set.insert(set.end(), s.begin(), s.end()); return true; }
      case 'W': { auto s = intersect(complement(kWord), kAscii); set.insert(set.end(), s.begin(), s.end()); return true; }
      case 'S': { auto s = complement(kSpaceEither); set.insert(set.end(), s.begin(), s.end()); return true; }
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case 'x': return one(hex(2));
      case 'u': {
        if (peek('{')) fail("\\u{...} needs the u flag, which is not supported");
        const char32_t v = hex(4);
        // A UTF-16 surrogate pair (\uD83D\uDE00) is the one character it encodes: the
        // output is UTF-8, where a lone surrogate is no character at all.
        if (v >= 0xD800 && v <= 0xDBFF && pos_ + 1 < cps_.size() && cps_[pos_] == '\\' && cps_[pos_ + 1] == 'u') {
          const size_t back = pos_;
          pos_ += 2;
          const char32_t low = hex(4);
          if (low >= 0xDC00 && low <= 0xDFFF) return one(0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00));
          pos_ = back;
        }
        if (v >= 0xD800 && v <= 0xDFFF && !in_class) {
          pos_ = at;
          fail("a lone surrogate escape matches no character of UTF-8 text");
        }
        return one(v);
      }
      case '0':
        if (pos_ < cps_.size() && cps_[pos_] >= '0' && cps_[pos_] <= '9') fail("octal escapes are not supported");
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        pos_ = at;
        fail("word boundary assertions are not supported");
      case 'B': pos_ = at; fail("word boundary assertions are not supported");
      case 'k': pos_ = at; fail("backreferences are not supported");
      case 'c': pos_ = at; fail("control escapes \\c are not supported");
      case 'p': case 'P': pos_ = at; fail("Unicode property escapes are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') {
      pos_ = at;
      fail("backreferences are not supported");
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      pos_ = at;
      fail(std::string("unknown escape '\\") + char(c) + "'");
    }
    return one(c);  // identity escape of a syntax character
  }

  Node parse_class() {
    const size_t open = pos_++;
    const bool negated = peek('^');
    if (negated) ++pos_;
    if (peek(']')) fail("an empty class '[]' or '[^]' means different things in ECMAScript and Python");
    CodeRanges set;
    bool shorthand = false;
    while (true) {
      if (pos_ >= cps_.size()) {
        pos_ = open;
        fail("missing ']'");
      }
      if (cps_[pos_] == ']') {
        ++pos_;
        break;
      }
      // One class atom: a code point, or a shorthand set.
      auto atom = [&](CodeRanges& out) {
        if (cps_[pos_] == '\\') {
          ++pos_;
          return parse_escape(true, out);
        }
        const char32_t v = cps_[pos_++];
        out.emplace_back(v, v);
        return false;
      };
      CodeRanges lo_set;
      const bool lo_short = atom(lo_set);
      shorthand |= lo_short;
      if (peek('-') && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        const size_t dash = pos_++;
        CodeRanges hi_set;
        const bool hi_short = atom(hi_set);
        if (lo_short || hi_short) {
          pos_ = dash;
          fail("a class range with a shorthand (\\d, \\w, \\s) at an end");
        }
        if (lo_set[0].first > hi_set[0].first) {
          pos_ = dash;
          fail("class range out of order");
        }
        set.emplace_back(lo_set[0].first, hi_set[0].first);
      } else {
        set.insert(set.end(), lo_set.begin(), lo_set.end());
      }
    }
    set = normalize(std::move(set));
    if (negated) {
      set = complement(set);
      if (shorthand) set = intersect(set, kAsciiSafe);
    }
    if (without_surrogates(set).empty()) {
      pos_ = open;
      fail("the class matches no character");
    }
    return chars(set);
  }

  std::vector<char32_t> cps_;
  size_t pos_ = 0;
  std::string pointer_;
};

}  // namespace

std::vector<RegexAlternative> parse_regex(const std::string& pattern, const std::string& pointer) {
  Parser parser(pattern, pointer);
  return parser.parse_top();
}

}  // namespace olmo2::structured::detail
