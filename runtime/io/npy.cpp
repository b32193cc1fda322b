#include "runtime/io/npy.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace olmo2 {

static_assert(std::endian::native == std::endian::little,
              ".npy token files are read and written as little-endian without conversion");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// One value of the header dict: a string, a bool, or a tuple of non-negative ints.
struct PyValue {
  enum Kind { Str, Bool, Tuple } kind = Str;
  std::string text;
  bool flag = false;
  std::vector<uint64_t> dims;
};

// "(5,)", "(2, 3)", "()" — a shape as Python prints it.
std::string tuple_text(const std::vector<uint64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

// Throws the InputError for header text that is not the dict numpy writes; shows the text.
[[noreturn]] void invalid_dict(const std::string& source, std::string_view text,
                               const std::string& what) {
  std::string shown(text.substr(0, 200));
  if (text.size() > 200) shown += "...";
  OLMO2_THROW(InputError, source, ": npy header is not a valid dict (", what, "): \"", shown, "\"");
}

// Recursive-descent parser for the subset of Python literals numpy writes in a header:
// a dict of string keys to strings, True/False and tuples of ints (a trailing 'L', as
// Python 2 wrote long ints, is accepted).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  std::vector<std::pair<std::string, PyValue>> dict() {
    std::vector<std::pair<std::string, PyValue>> out;
    expect('{');
    while (true) {
      if (peek() == '}') break;
      if (peek() != '\'' && peek() != '"') fail("expected a string key");
      std::string key = string();
      expect(':');
      out.emplace_back(std::move(key), value());
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
    }
    ++i_;
    if (peek() != '\0') fail("text after the closing '}'");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    invalid_dict(source_, s_, what + " at offset " + std::to_string(i_));
  }

  // Next non-whitespace character, or '\0' at the end.
  char peek() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
    return i_ < s_.size() ? s_[i_] : '\0';
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }

  std::string string() {
    const char quote = s_[i_++];
    const size_t end = s_.find(quote, i_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(i_, end - i_));
    if (out.find('\\') != std::string::npos) fail("escape sequence in a string");
    i_ = end + 1;
    return out;
  }

  uint64_t integer() {
    uint64_t v = 0;
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const uint64_t d = static_cast<uint64_t>(s_[i_] - '0');
      if (v > (UINT64_MAX - d) / 10) fail("integer too large");
      v = v * 10 + d;
      ++i_;
    }
    if (i_ == start) fail("expected a non-negative integer");
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;
    return v;
  }

  PyValue value() {
    PyValue v;
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = PyValue::Str;
      v.text = string();
    } else if (s_.substr(i_, 4) == "True" || s_.substr(i_, 5) == "False") {
      v.kind = PyValue::Bool;
      v.flag = s_[i_] == 'T';
      i_ += v.flag ? 4 : 5;
    } else if (c == '(') {
      v.kind = PyValue::Tuple;
      ++i_;
      bool comma = false;  // "(5)" is the int 5 in Python, not a tuple
      while (peek() != ')') {
        v.dims.push_back(integer());
        if (peek() == ',') {
          ++i_;
          comma = true;
        } else if (peek() != ')') {
          fail("expected ',' or ')' in a tuple");
        }
      }
      ++i_;
      if (v.dims.size() == 1 && !comma)
        fail("'(N)' is an int, not a tuple; a 1-D shape is written '(N,)'");
    } else {
      fail(c ? std::string("unexpected '") + c + "'" : std::string("unexpected end"));
    }
    return v;
  }

  std::string_view s_;
  const std::string& source_;
  size_t i_ = 0;
};

}  // namespace

size_t npy_itemsize(NpyDType dtype) { return dtype == NpyDType::U16 ? 2 : 4; }

const char* npy_descr(NpyDType dtype) { return dtype == NpyDType::U16 ? "<u2" : "<u4"; }

NpyHeader parse_npy_header(const uint8_t* bytes, size_t size, const std::string& source) {
  if (size < kMagicLen || std::memcmp(bytes, kMagic, kMagicLen) != 0) {
    OLMO2_THROW(InputError, source,
                " is not an npy file (bad magic: it does not start with \"\\x93NUMPY\")");
  }
  if (size < kMagicLen + 2) {
    OLMO2_THROW(InputError, source, ": truncated npy header (", size, " bytes, no version bytes)");
  }
  NpyHeader h;
  h.major = bytes[6];
  h.minor = bytes[7];
  if ((h.major != 1 && h.major != 2 && h.major != 3) || h.minor != 0) {
    OLMO2_THROW(InputError, source, ": unsupported npy version ", h.major, ".", h.minor,
                " (supported: 1.0, 2.0, 3.0)");
  }
  const size_t len_bytes = h.major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (size < prefix) {
    OLMO2_THROW(InputError, source, ": truncated npy header (", size, " bytes, shorter than the ",
                prefix, "-byte preamble of version ", h.major, ".0)");
  }
  uint64_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i)
    header_len |= static_cast<uint64_t>(bytes[8 + i]) << (8 * i);
  if (header_len > size - prefix) {
    OLMO2_THROW(InputError, source, ": truncated npy header (header length ", header_len,
                " but only ", size - prefix, " bytes follow)");
  }
  h.data_offset = prefix + static_cast<size_t>(header_len);

  const std::string_view text(reinterpret_cast<const char*>(bytes + prefix),
                              static_cast<size_t>(header_len));
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  const auto entries = HeaderParser(text, source).dict();
  for (const auto& [key, value] : entries) {
    const PyValue** slot = key == "descr"           ? &descr
                           : key == "fortran_order" ? &fortran
                           : key == "shape"         ? &shape
                                                    : nullptr;
    if (!slot) invalid_dict(source, text, "unknown key '" + key + "'");
    if (*slot) invalid_dict(source, text, "duplicate key '" + key + "'");
    *slot = &value;
  }
  if (!descr || !fortran || !shape) {
    invalid_dict(source, text,
                 std::string("missing key '") +
                     (!descr     ? "descr"
                      : !fortran ? "fortran_order"
                                 : "shape") +
                     "'");
  }
  if (descr->kind != PyValue::Str) invalid_dict(source, text, "'descr' is not a string");
  if (fortran->kind != PyValue::Bool)
    invalid_dict(source, text, "'fortran_order' is not True or False");
  if (shape->kind != PyValue::Tuple) invalid_dict(source, text, "'shape' is not a tuple");

  if (descr->text == "<u4") {
    h.dtype = NpyDType::U32;
  } else if (descr->text == "<u2") {
    h.dtype = NpyDType::U16;
  } else {
    OLMO2_THROW(InputError, source, " has dtype '", descr->text,
                "'; token files must be uint32 ('<u4') or uint16 ('<u2')");
  }
  if (fortran->flag) {
    OLMO2_THROW(InputError, source,
                " has fortran_order True; token files must be C order (fortran_order False)");
  }
  if (shape->dims.size() != 1) {
    OLMO2_THROW(InputError, source, " has shape ", tuple_text(shape->dims),
                "; token files must be 1-D");
  }
  h.count = shape->dims[0];
  const size_t item = npy_itemsize(h.dtype);
  if (h.count > UINT64_MAX / item) {
    OLMO2_THROW(InputError, source, " has shape ", tuple_text(shape->dims),
                ", which overflows the byte size");
  }
  const uint64_t need = h.count * item;
  const uint64_t have = size - h.data_offset;
  if (have != need) {
    OLMO2_THROW(InputError, source, ": data section is ", have < need ? "shorter" : "longer",
                " than its shape says (shape ", tuple_text(shape->dims), " of '", descr->text,
                "' needs ", need, " bytes, the file has ", have, " after the header)");
  }
  return h;
}

std::string npy_v1_header(NpyDType dtype, uint64_t count) {
  auto dict = [&](const std::string& n) {
    return std::string("{'descr': '") + npy_descr(dtype) + "', 'fortran_order': False, 'shape': (" +
           n + ",), }";
  };
  // Room for the widest count (20 digits), then padding and '\n' to a multiple of 64.
  const size_t widest = dict(std::to_string(UINT64_MAX)).size();
  const size_t total = (kMagicLen + 4 + widest + 1 + 63) / 64 * 64;
  const size_t header_len = total - kMagicLen - 4;
  std::string out(kMagic, kMagicLen);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header_len & 0xff);
  out += static_cast<char>((header_len >> 8) & 0xff);
  out += dict(std::to_string(count));
  out.append(total - 1 - out.size(), ' ');
  out += '\n';
  return out;
}

// ---- reader ----------------------------------------------------------------------

NpyFile::NpyFile(const std::string& path) : file_(path) {
  header_ = parse_npy_header(file_.data(), file_.size(), path);
}

uint32_t NpyFile::operator[](uint64_t i) const {
  const uint8_t* p = file_.data() + header_.data_offset;
  if (header_.dtype == NpyDType::U16) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p + 4 * i, 4);
  return v;
}

void NpyFile::read(uint64_t begin, std::span<uint32_t> out) const {
  OLMO2_CHECK(begin <= header_.count && out.size() <= header_.count - begin, "reading elements [",
              begin, ", ", begin + out.size(), ") of ", path(), ", which has ", header_.count);
  const uint8_t* p = file_.data() + header_.data_offset;
  if (header_.dtype == NpyDType::U32) {
    if (!out.empty()) std::memcpy(out.data(), p + 4 * begin, 4 * out.size());
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * (begin + i), 2);
    out[i] = v;
  }
}

// ---- writer ----------------------------------------------------------------------

NpyWriter::NpyWriter(const std::string& path)
    : path_(path), tmp_path_(path + ".tmp"), uncaught_at_start_(std::uncaught_exceptions()) {
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) OLMO2_THROW(Error, "cannot create ", tmp_path_, ": ", std::strerror(errno));
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
  const std::string header = npy_v1_header(NpyDType::U32, 0);
  if (std::fwrite(header.data(), 1, header.size(), file_) != header.size()) {
    const int err = errno;
    abandon();
    OLMO2_THROW(Error, "writing ", tmp_path_, " failed: ", std::strerror(err));
  }
}

NpyWriter::~NpyWriter() {
  if (!file_) return;
  if (std::uncaught_exceptions() > uncaught_at_start_) {
    abandon();
    return;
  }
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "olmo2: NpyWriter: %s\n", e.what());
  }
}

void NpyWriter::append(std::span<const uint32_t> tokens) {
  if (!file_) OLMO2_THROW(Error, "NpyWriter for ", path_, ": append after close");
  if (tokens.empty()) return;
  if (std::fwrite(tokens.data(), sizeof(uint32_t), tokens.size(), file_) != tokens.size()) {
    OLMO2_THROW(Error, "writing ", tmp_path_, " failed: ", std::strerror(errno));
  }
  count_ += tokens.size();
}

void NpyWriter::close() {
  if (!file_) return;
  const std::string header = npy_v1_header(NpyDType::U32, count_);
  bool ok = std::fflush(file_) == 0 && std::fseek(file_, 0, SEEK_SET) == 0 &&
            std::fwrite(header.data(), 1, header.size(), file_) == header.size() &&
            std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  int err = errno;
  if (std::fclose(file_) != 0 && ok) {
    ok = false;
    err = errno;
  }
  file_ = nullptr;
  if (!ok) {
    std::remove(tmp_path_.c_str());
    OLMO2_THROW(Error, "writing ", tmp_path_, " failed: ", std::strerror(err));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    err = errno;
    std::remove(tmp_path_.c_str());
    OLMO2_THROW(Error, "cannot rename ", tmp_path_, " to ", path_, ": ", std::strerror(err));
  }
}

void NpyWriter::abandon() noexcept {
  if (!file_) return;
  std::fclose(file_);
  file_ = nullptr;
  std::remove(tmp_path_.c_str());
}

}  // namespace olmo2
