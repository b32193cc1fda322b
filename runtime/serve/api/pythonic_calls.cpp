// parse_pythonic_calls (tool_call_parser.h): Olmo 3 Instruct's call lines, a small
// recursive-descent reader of Python call expressions with literal arguments
// (docs/architecture.md §8, "Tool calls"). The literal forms are Python's (the
// language reference's string, integer, float literals; True/False/None), plus JSON's
// true/false/null since the chat template writes history values with tojson.
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/serve/api/tool_call_parser.h"

namespace olmo2 {

namespace {

using ordered = nlohmann::ordered_json;

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  std::vector<ParsedToolCall> calls() {
    std::vector<ParsedToolCall> out;
    skip_separators();
    while (i_ < s_.size()) {
      out.push_back(call());
      skip_space();
      if (i_ < s_.size() && s_[i_] != '\n' && s_[i_] != ',') fail("a newline between calls");
      skip_separators();
    }
    if (out.empty()) fail("a call");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& expected) const {
    OLMO2_THROW(InputError, "pythonic tool call: expected ", expected, " at offset ", i_);
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void skip_ws() {  // inside brackets newlines are whitespace too (Python's implicit joining)
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) ++i_;
  }
  void skip_separators() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n' || s_[i_] == ',')) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("'") + c + "'");
  }
  static bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }

  std::string identifier(bool dotted) {
    skip_ws();
    const size_t start = i_;
    if (i_ >= s_.size() || !ident_start(s_[i_])) fail("a name");
    while (i_ < s_.size() && (ident_char(s_[i_]) || s_[i_] == '-' || (dotted && s_[i_] == '.'))) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }

  ParsedToolCall call() {
    ParsedToolCall c;
    c.name = identifier(true);
    expect('(');
    ordered args = ordered::object();
    while (!eat(')')) {
      const std::string key = identifier(false);
      if (!eat('=')) fail("keyword argument '" + key + "=' (positional arguments have no name)");
      if (args.contains(key)) fail("one value of argument '" + key + "'");
      args[key] = value();
      if (!eat(',')) {
        expect(')');
        break;
      }
    }
    c.arguments = args.dump();
    return c;
  }

  ordered value() {
    skip_ws();
    if (i_ >= s_.size()) fail("a value");
    const char c = s_[i_];
    if (c == '"' || c == '\'') return string_literal();
    if (c == '[' || c == '(') return sequence(c == '[' ? ']' : ')');
    if (c == '{') return dict();
    if (c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9')) return number();
    const std::string word = identifier(false);
    if (word == "True" || word == "true") return true;
    if (word == "False" || word == "false") return false;
    if (word == "None" || word == "null") return nullptr;
    i_ -= word.size();
    fail("a literal (not the name '" + word + "')");
  }

  ordered sequence(char close) {
    ++i_;
    ordered out = ordered::array();
    while (!eat(close)) {
      out.push_back(value());
      if (!eat(',')) {
        expect(close);
        break;
      }
    }
    return out;
  }

  ordered dict() {
    ++i_;
    ordered out = ordered::object();
    while (!eat('}')) {
      skip_ws();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) fail("a string key");
      const std::string key = string_literal().get<std::string>();
      expect(':');
      out[key] = value();
      if (!eat(',')) {
        expect('}');
        break;
      }
    }
    return out;
  }

  ordered number() {
    const size_t start = i_;
    if (s_[i_] == '-' || s_[i_] == '+') ++i_;
    bool is_float = false;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c >= '0' && c <= '9') {
        ++i_;
      } else if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
        ++i_;
        if ((c == 'e' || c == 'E') && i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) ++i_;
      } else if (c == '_') {
        ++i_;  // Python's digit grouping
      } else {
        break;
      }
    }
    std::string text;
    for (size_t k = start; k < i_; ++k) if (s_[k] != '_') text += s_[k];
    if (text == "-" || text == "+" || text.empty()) fail("a number");
    try {
      size_t used = 0;
      if (!is_float) {
        const long long v = std::stoll(text, &used);
        if (used == text.size()) return v;
      } else {
        const double v = std::stod(text, &used);
        if (used == text.size() && std::isfinite(v)) return v;
      }
    } catch (const std::exception&) {
    }
    i_ = start;
    fail("a number (got '" + text + "')");
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex(size_t digits) {
    if (i_ + digits > s_.size()) fail(std::to_string(digits) + " hex digits");
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else fail("a hex digit");
    }
    return v;
  }

  // A Python string literal: single or triple quoted, the escapes of the language
  // reference (\\ \' \" \n \t \r \b \f \v \0 \xHH \uXXXX \UXXXXXXXX, a surrogate pair
  // joined); an unknown escape keeps its backslash, as Python does.
  ordered string_literal() {
    const char q = s_[i_];
    const bool triple = s_.substr(i_, 3) == std::string(3, q);
    i_ += triple ? 3 : 1;
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("the closing quote");
      const char c = s_[i_];
      if (c == q && (!triple || s_.substr(i_, 3) == std::string(3, q))) {
        i_ += triple ? 3 : 1;
        return out;
      }
      if (c == '\n' && !triple) fail("the closing quote before the line's end");
      ++i_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("an escape");
      const char e = s_[i_++];
      switch (e) {
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '0': out += '\0'; break;
        case '\n': break;  // a line continuation
        case 'x': append_utf8(out, hex(2)); break;
        case 'u': {
          uint32_t cp = hex(4);
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            const uint32_t lo = hex(4);
            if (lo < 0xDC00 || lo > 0xDFFF) fail("a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) fail("a code point that is not a lone surrogate");
          append_utf8(out, cp);
          break;
        }
        case 'U': {
          const uint32_t cp = hex(8);
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("a valid code point");
          append_utf8(out, cp);
          break;
        }
        default: out += '\\'; out += e;
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::vector<ParsedToolCall> parse_pythonic_calls(std::string_view body) {
  return Reader(body).calls();
}

}  // namespace olmo2
