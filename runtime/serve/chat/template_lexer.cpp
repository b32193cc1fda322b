// The chat-template lexer (template_lexer.h). Its rules are those of Jinja2 3.1's
// lexer.py (the "root", block, variable, comment and raw states) under trim_blocks and
// lstrip_blocks; whitespace is Python's (str.isspace), as in Jinja2's \s patterns.
#include "runtime/serve/chat/template_lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "runtime/serve/chat/python_str.h"

namespace olmo2::chat {
namespace {

/// The code point at byte `i` of `s` and its length in bytes.
char32_t code_point_at(const std::string& s, size_t i, size_t* len) {
  size_t n = 1;
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c >= 0xC0) n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  if (i + n > s.size()) n = 1;
  const std::u32string cp = decode_utf8(std::string_view(s).substr(i, n));
  *len = cp.size() == 1 ? n : 1;
  return cp.empty() ? c : cp[0];
}

size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size()) {
    size_t len = 1;
    if (!is_py_space(code_point_at(s, i, &len))) break;
    i += len;
  }
  return i;
}

bool all_space(const std::string& s, size_t from) { return skip_space(s, from) == s.size(); }

std::string rstrip_space(const std::string& s) { return py_strip(s, std::nullopt, false, true); }

bool at(const std::string& s, size_t i, const char* lit) { return s.compare(i, std::char_traits<char>::length(lit), lit) == 0; }

[[noreturn]] void fail(const std::string& src, size_t pos, const std::string& what) {
  OLMO2_THROW(InputError, "chat template: ", what, " at ", describe_position(src, pos));
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {}

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      const size_t p = next_tag(pos);
      if (p == std::string::npos) {
        push(TokenType::Text, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[p + 1];
      size_t q = p + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      size_t raw_body = 0;
      const bool raw = kind == '%' && raw_begin(q, &raw_body);
      push(TokenType::Text, control_text(src_.substr(pos, p - pos), sign, kind != '{'), pos);
      if (raw) {
        line_starting_ = src_[raw_body - 1] == '\n';
        pos = raw_block(raw_body);
      } else if (kind == '#') {
        pos = comment(p, q);
      } else {
        pos = tag(p, q, kind == '%');
      }
    }
    tokens_.push_back(Token{TokenType::End, "", 0, 0.0, src_.size()});
    return std::move(tokens_);
  }

 private:
  size_t next_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // The text before a tag: `-` strips its trailing whitespace; otherwise lstrip_blocks
  // removes the whitespace between its last line start and a block or comment tag.
  std::string control_text(std::string text, char sign, bool block_or_comment) const {
    if (sign == '-') return rstrip_space(text);
    if (sign == '+' || !block_or_comment) return text;
    const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if ((line_start > 0 || line_starting_) && line_start < text.size() && all_space(text, line_start))
      text.resize(line_start);
    return text;
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})`: the whole begin tag; `*body` is where its text starts.
  bool raw_begin(size_t q, size_t* body) {
    size_t i = skip_space(src_, q);
    if (!at(src_, i, "raw")) return false;
    i = skip_space(src_, i + 3);
    if (at(src_, i, "-%}")) {
      *body = skip_space(src_, i + 3);
    } else if (at(src_, i, "%}")) {
      *body = i + 2;
    } else {
      return false;
    }
    return true;
  }

  size_t raw_block(size_t body) {
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
      if (sign) ++j;
      j = skip_space(src_, j);
      if (!at(src_, j, "endraw")) continue;
      j = skip_space(src_, j + 6);
      size_t end;
      if (!end_marker(j, '%', &end)) continue;
      push(TokenType::Text, control_text(src_.substr(body, i - body), sign, true), body);
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
    fail(src_, body, "missing end of raw directive");
  }

  // Whether `+X}`, `-X}\s*` or `X}` (+ one newline for blocks and comments, trim_blocks)
  // starts at i, X being '%', '#' or '}'; *end is where the match ends.
  bool end_marker(size_t i, char x, size_t* end) const {
    const std::string close = std::string(1, x) + "}";
    if (x != '}' && at(src_, i, ("+" + close).c_str())) {
      *end = i + 3;
    } else if (at(src_, i, ("-" + close).c_str())) {
      *end = skip_space(src_, i + 3);
    } else if (at(src_, i, close.c_str())) {
      *end = i + 2;
      if (x != '}' && *end < src_.size() && src_[*end] == '\n') ++*end;
    } else {
      return false;
    }
    return true;
  }

  size_t comment(size_t p, size_t q) {
    for (size_t i = q; i < src_.size(); ++i) {
      size_t end;
      if (end_marker(i, '#', &end)) {
        line_starting_ = src_[end - 1] == '\n';
        return end;
      }
    }
    fail(src_, p, "missing end of comment tag");
  }

  size_t tag(size_t p, size_t q, bool block) {
    push(block ? TokenType::BlockBegin : TokenType::VarBegin, "", p);
    std::vector<char> balance;
    size_t i = q;
    while (true) {
      size_t end;
      if (i >= src_.size()) fail(src_, p, std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") + "'");
      if (balance.empty() && end_marker(i, block ? '%' : '}', &end)) {
        push(block ? TokenType::BlockEnd : TokenType::VarEnd, "", i);
        line_starting_ = src_[end - 1] == '\n';
        return end;
      }
      const size_t after_space = skip_space(src_, i);
      if (after_space != i) {
        i = after_space;
        continue;
      }
      i = expression_token(i, balance);
    }
  }

  size_t expression_token(size_t i, std::vector<char>& balance) {
    const char c = src_[i];
    if (std::isdigit(static_cast<unsigned char>(c))) return number(i);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[j])) || src_[j] == '_')) ++j;
      push(TokenType::Name, src_.substr(i, j - i), i);
      return j;
    }
    if (c == '\'' || c == '"') return string_literal(i);
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                       "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      if (!at(src_, i, op)) continue;
      const std::string o(op);
      if (o == "(" || o == "[" || o == "{") balance.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
      if (o == ")" || o == "]" || o == "}") {
        if (balance.empty()) fail(src_, i, "unexpected '" + o + "'");
        if (balance.back() != o[0]) fail(src_, i, "unexpected '" + o + "', expected '" + balance.back() + "'");
        balance.pop_back();
      }
      push(TokenType::Op, o, i);
      return i + o.size();
    }
    size_t len = 1;
    code_point_at(src_, i, &len);
    fail(src_, i, "unexpected character '" + src_.substr(i, len) + "'");
  }

  // Jinja2's integer and float literals: digits with '_' separators, a float having a
  // fraction and/or an exponent; integers may be 0b, 0o or 0x prefixed.
  size_t number(size_t i) {
    auto digits = [&](size_t j, auto is_digit) {
      while (j < src_.size() && (is_digit(src_[j]) || (src_[j] == '_' && j + 1 < src_.size() && is_digit(src_[j + 1]))))
        ++j;
      return j;
    };
    auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    std::string clean;
    auto strip = [&](size_t a, size_t b) {
      clean.clear();
      for (size_t k = a; k < b; ++k)
        if (src_[k] != '_') clean += src_[k];
    };
    if (src_[i] == '0' && i + 1 < src_.size() && std::strchr("bBoOxX", src_[i + 1]) && src_[i + 1]) {
      const char base_ch = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[i + 1])));
      const int base = base_ch == 'b' ? 2 : base_ch == 'o' ? 8 : 16;
      auto in_base = [base](char ch) { return base == 16 ? std::isxdigit(static_cast<unsigned char>(ch)) != 0 : ch >= '0' && ch < '0' + base; };
      size_t j = i + 2;
      if (j < src_.size() && src_[j] == '_') ++j;
      const size_t end = digits(j, in_base);
      if (end == j) fail(src_, i, "invalid integer literal");
      strip(j, end);
      return push_int(std::strtoll(clean.c_str(), nullptr, base), i, end);
    }
    size_t j = digits(i, dec);
    size_t k = j;
    bool is_float = false;
    if (k + 1 < src_.size() && src_[k] == '.' && dec(src_[k + 1])) k = digits(k + 1, dec), is_float = true;
    if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
      size_t e = k + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && dec(src_[e])) k = digits(e, dec), is_float = true;
    }
    if (is_float) {
      strip(i, k);
      Token t{TokenType::Float, src_.substr(i, k - i), 0, std::strtod(clean.c_str(), nullptr), i};
      tokens_.push_back(t);
      return k;
    }
    strip(i, j);
    errno = 0;
    const long long v = std::strtoll(clean.c_str(), nullptr, 10);
    if (errno == ERANGE) fail(src_, i, "integer literal too large");
    return push_int(v, i, j);
  }

  size_t push_int(long long v, size_t at_pos, size_t end) {
    tokens_.push_back(Token{TokenType::Int, src_.substr(at_pos, end - at_pos), v, 0.0, at_pos});
    return end;
  }

  // A quoted string with Python's escapes (Jinja2 decodes with "unicode-escape").
  size_t string_literal(size_t i) {
    const char quote = src_[i];
    std::string out;
    size_t j = i + 1;
    while (true) {
      if (j >= src_.size()) fail(src_, i, "unterminated string");
      const char c = src_[j];
      if (c == quote) break;
      if (c != '\\' || j + 1 >= src_.size()) {
        out += c;
        ++j;
        continue;
      }
      const char e = src_[j + 1];
      j += 2;
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (j + n > src_.size()) fail(src_, j - 2, "truncated \\" + std::string(1, e) + " escape");
          const std::string hex = src_.substr(j, n);
          for (char h : hex)
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail(src_, j - 2, "truncated \\" + std::string(1, e) + " escape");
          out += encode_utf8(std::u32string(1, static_cast<char32_t>(std::strtoul(hex.c_str(), nullptr, 16))));
          j += n;
          break;
        }
        case 'N': fail(src_, j - 2, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            size_t k = j - 1, n = 0;
            unsigned v = 0;
            while (k < src_.size() && n < 3 && src_[k] >= '0' && src_[k] <= '7') v = v * 8 + (src_[k++] - '0'), ++n;
            out += encode_utf8(std::u32string(1, static_cast<char32_t>(v)));
            j = k;
          } else {  // unknown escapes keep their backslash, as Python does
            out += '\\';
            out += e;
          }
      }
    }
    push(TokenType::String, out, i, true);
    return j + 1;
  }

  void push(TokenType type, std::string text, size_t pos, bool keep_empty = false) {
    if (type == TokenType::Text && text.empty() && !keep_empty) return;
    tokens_.push_back(Token{type, std::move(text), 0, 0.0, pos});
  }

  const std::string& src_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;
};

}  // namespace

std::string normalize_template_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string describe_position(const std::string& source, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

std::vector<Token> lex_template(const std::string& source) { return Lexer(source).run(); }

}  // namespace olmo2::chat
