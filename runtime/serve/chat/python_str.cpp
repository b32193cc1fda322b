// Python str methods on UTF-8 (python_str.h). Semantics: CPython's Objects/unicodeobject.c
// as documented in the Python Library Reference, "String Methods".
#include "runtime/serve/chat/python_str.h"

#include <cstdio>

#include "core/error.h"

namespace olmo2::chat {

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (extra > 0 && i + extra >= s.size()) extra = -1;  // truncated sequence
    char32_t cp = extra <= 0 ? c : c & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) {
        extra = -1;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (extra < 0) {  // not valid UTF-8: the byte stands for itself
      out.push_back(c);
      ++i;
    } else {
      out.push_back(cp);
      i += extra + 1;
    }
  }
  return out;
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

size_t py_len(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = decode_utf8(s);
  const std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_py_space(c); };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && strip_it(cps[b])) ++b;
  if (right) while (e > b && strip_it(cps[e - 1])) --e;
  return encode_utf8(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) OLMO2_THROW(InputError, "chat template: str.split: empty separator");
    size_t start = 0;
    while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  const std::u32string cps = decode_utf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_py_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<long>(out.size()) == maxsplit) {  // the rest, as it is
      out.push_back(encode_utf8(std::u32string_view(cps).substr(i)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !is_py_space(cps[j])) ++j;
    out.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, long count) {
  std::string out;
  long done = 0;
  if (old.empty()) {  // Python inserts `repl` around every code point
    const std::u32string cps = decode_utf8(s);
    for (char32_t c : cps) {
      if (count < 0 || done < count) out += repl, ++done;
      out += encode_utf8(std::u32string(1, c));
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(repl);
    start = at + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

namespace {
bool is_lower_ascii(char c) { return c >= 'a' && c <= 'z'; }
bool is_upper_ascii(char c) { return c >= 'A' && c <= 'Z'; }
char up(char c) { return is_lower_ascii(c) ? static_cast<char>(c - 32) : c; }
char down(char c) { return is_upper_ascii(c) ? static_cast<char>(c + 32) : c; }
}  // namespace

std::string py_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = up(c);
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = down(c);
  return out;
}

std::string py_title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    const bool cased = is_lower_ascii(c) || is_upper_ascii(c);
    if (cased) c = previous_cased ? down(c) : up(c);
    previous_cased = cased;
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out = py_lower(s);
  if (!out.empty()) out[0] = up(out[0]);
  return out;
}

std::string jinja_title(std::string_view s) {
  auto separator = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c); };
  const std::u32string cps = decode_utf8(s);
  std::u32string out;
  bool word_start = true;
  for (char32_t c : cps) {
    if (separator(c)) {
      word_start = true;
      out.push_back(c);
      continue;
    }
    const char ascii = c < 0x80 ? static_cast<char>(c) : 0;
    out.push_back(ascii ? static_cast<char32_t>(word_start ? up(ascii) : down(ascii)) : c);
    word_start = false;
  }
  return encode_utf8(out);
}

namespace {
// str.isprintable for the code points that occur in practice: controls (Cc), format
// characters (Cf), separators other than the space (Zs, Zl, Zp), surrogates and private
// use. Unassigned code points (Cn) are not known here and count as printable.
bool py_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB))
    return false;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E) return false;
  return !((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xF0000));
}
}  // namespace

std::string py_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const char quote = has_single && s.find('"') == std::string_view::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_printable(c)) {
      std::snprintf(buf, sizeof buf, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x",
                    static_cast<unsigned>(c));
      out += buf;
    } else {
      out += encode_utf8(std::u32string(1, c));
    }
  }
  out += quote;
  return out;
}

std::vector<size_t> slice_positions(size_t length, std::optional<long> start, std::optional<long> stop,
                                    std::optional<long> step) {
  const long n = static_cast<long>(length);
  const long st = step.value_or(1);
  if (st == 0) OLMO2_THROW(InputError, "chat template: slice step cannot be zero");
  auto adjust = [&](std::optional<long> v, long dflt) {
    if (!v) return dflt;
    long x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const long b = adjust(start, st > 0 ? 0 : n - 1);
  const long e = adjust(stop, st > 0 ? n : -1);
  std::vector<size_t> out;
  if (st > 0) {
    for (long i = b; i < e; i += st) out.push_back(static_cast<size_t>(i));
  } else {
    for (long i = b; i > e; i += st) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

}  // namespace olmo2::chat
