// .npy token files: the writer's exact header bytes against the numpy format spec,
// write/read round trips, the temporary-file-then-rename discipline, one test per
// malformed input (each an InputError naming the fault), and interop with numpy
// itself (tests/io/npy_check.py) when a python with numpy is available.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/io/npy.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// A whole .npy file: version bytes, the header text exactly as given, then `data`.
std::string npy_bytes(const std::string& header, const std::string& data, int major = 1) {
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const uint64_t n = header.size();
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string dict(const std::string& descr, const std::string& shape,
                 const char* fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }\n";
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  if (!s.empty()) std::memcpy(s.data(), values.data(), s.size());
  return s;
}

// The message parse_npy_header gives for the in-memory file `bytes`.
std::string header_error(const std::string& bytes) {
  try {
    parse_npy_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "tokens.npy");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

NpyHeader parse(const std::string& bytes) {
  return parse_npy_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "t.npy");
}

// ---- writer --------------------------------------------------------------------------

TEST(NpyWriter, HeaderBytesFollowTheNumpySpec) {
  test::TempDir dir;
  const std::string path = dir.file("tokens.npy");
  std::vector<uint32_t> tokens = {0, 1, 100257, 0xffffffffu, 7};
  {
    NpyWriter w(path);
    w.append(tokens);
    w.close();
  }
  const std::string bytes = slurp(path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), std::string("\x93NUMPY", 6));
  EXPECT_EQ(bytes[6], '\x01');  // version 1.0
  EXPECT_EQ(bytes[7], '\x00');
  const size_t header_len = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
  const size_t data_offset = 10 + header_len;
  EXPECT_EQ(data_offset % 64, 0u);
  ASSERT_EQ(bytes.size(), data_offset + 4 * tokens.size());
  const std::string text = bytes.substr(10, header_len);
  EXPECT_THAT(text, StartsWith("{'descr': '<u4', 'fortran_order': False, 'shape': (5,), }"));
  EXPECT_THAT(text, EndsWith("\n"));
  const size_t dict_end = text.find('}') + 1;
  EXPECT_EQ(text.find_first_not_of(' ', dict_end), text.size() - 1) << "padding must be spaces";
  EXPECT_EQ(bytes.substr(data_offset), raw(tokens));
  EXPECT_EQ(bytes.substr(0, data_offset), npy_v1_header(NpyDType::U32, 5));
}

TEST(NpyWriter, HeaderLengthDoesNotDependOnTheCount) {
  const size_t n = npy_v1_header(NpyDType::U32, 0).size();
  EXPECT_EQ(n % 64, 0u);
  EXPECT_EQ(npy_v1_header(NpyDType::U32, 123456789).size(), n);
  EXPECT_EQ(npy_v1_header(NpyDType::U32, UINT64_MAX).size(), n);
  EXPECT_THAT(npy_v1_header(NpyDType::U16, 3),
              HasSubstr("{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }"));
}

TEST(NpyWriter, RoundTripThroughTheReader) {
  test::TempDir dir;
  const std::string path = dir.file("t.npy");
  std::vector<uint32_t> all;
  {
    NpyWriter w(path);
    for (uint32_t chunk = 0; chunk < 5; ++chunk) {
      std::vector<uint32_t> part(chunk * 1000 + 3);
      for (size_t i = 0; i < part.size(); ++i)
        part[i] = static_cast<uint32_t>(all.size() + i) * 2654435761u;
      w.append(part);
      all.insert(all.end(), part.begin(), part.end());
    }
    w.append({});
    EXPECT_EQ(w.count(), all.size());
    w.close();
    w.close();  // idempotent
  }
  NpyFile f(path);
  EXPECT_EQ(f.dtype(), NpyDType::U32);
  EXPECT_EQ(f.header().major, 1);
  ASSERT_EQ(f.size(), all.size());
  std::vector<uint32_t> back(all.size());
  f.read(0, back);
  EXPECT_EQ(back, all);
  EXPECT_EQ(f[4321], all[4321]);
  std::vector<uint32_t> mid(10);
  f.read(2000, mid);
  EXPECT_TRUE(std::equal(mid.begin(), mid.end(), all.begin() + 2000));
  std::vector<uint32_t> past(2);
  EXPECT_THROW(f.read(all.size() - 1, past), ShapeError);
}

TEST(NpyWriter, EmptyFileHasShapeZero) {
  test::TempDir dir;
  { NpyWriter w(dir.file("e.npy")); }
  EXPECT_THAT(slurp(dir.file("e.npy")), HasSubstr("'shape': (0,), }"));
  EXPECT_EQ(NpyFile(dir.file("e.npy")).size(), 0u);
}

TEST(NpyWriter, WritesTemporaryFileAndRenamesOnClose) {
  test::TempDir dir;
  const std::string path = dir.file("t.npy");
  NpyWriter w(path);
  const std::vector<uint32_t> tokens = {1, 2, 3};
  w.append(tokens);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
  w.close();
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_THROW(w.append(tokens), Error);
}

TEST(NpyWriter, ReplacesAnExistingFileOnlyOnClose) {
  test::TempDir dir;
  const std::string path = dir.file("t.npy");
  write_file(path, "old");
  NpyWriter w(path);
  const std::vector<uint32_t> tokens = {9, 8};
  w.append(tokens);
  EXPECT_EQ(slurp(path), "old");
  w.close();
  EXPECT_EQ(NpyFile(path).size(), 2u);
}

TEST(NpyWriter, DestructorCloses) {
  test::TempDir dir;
  {
    NpyWriter w(dir.file("t.npy"));
    const std::vector<uint32_t> tokens = {4, 5, 6, 7};
    w.append(tokens);
  }
  NpyFile f(dir.file("t.npy"));
  EXPECT_EQ(f.size(), 4u);
  EXPECT_EQ(f[3], 7u);
}

TEST(NpyWriter, ExceptionDuringWritingLeavesNoFile) {
  test::TempDir dir;
  const std::string path = dir.file("t.npy");
  try {
    NpyWriter w(path);
    const std::vector<uint32_t> tokens = {1, 2, 3};
    w.append(tokens);
    throw std::runtime_error("tokenizer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  NpyWriter w(path);
  w.abandon();
  w.close();  // no-op after abandon
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(NpyWriter, CannotCreateNamesThePath) {
  test::TempDir dir;
  const std::string path = dir.file("no/such/dir/t.npy");
  try {
    NpyWriter w(path);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot create " + path + ".tmp"));
    EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
  }
}

// ---- reader: accepted forms ----------------------------------------------------------

TEST(NpyReader, ReadsUint16) {
  test::TempDir dir;
  const std::vector<uint16_t> v = {0, 65535, 100, 7};
  write_file(dir.file("u2.npy"), npy_bytes(dict("<u2", "(4,)"), raw(v)));
  NpyFile f(dir.file("u2.npy"));
  EXPECT_EQ(f.dtype(), NpyDType::U16);
  std::vector<uint32_t> out(4);
  f.read(0, out);
  EXPECT_EQ(out, (std::vector<uint32_t>{0, 65535, 100, 7}));
  EXPECT_EQ(f[1], 65535u);
}

TEST(NpyReader, AcceptsVersions2And3AndHeaderVariants) {
  const std::vector<uint32_t> v = {5, 6};
  for (int major : {2, 3}) {
    const NpyHeader h = parse(npy_bytes(dict("<u4", "(2,)"), raw(v), major));
    EXPECT_EQ(h.major, major);
    EXPECT_EQ(h.count, 2u);
    EXPECT_EQ(h.data_offset, 12 + dict("<u4", "(2,)").size());
  }
  // Key order, double quotes, no trailing comma, no newline, Python 2 long ints.
  EXPECT_EQ(
      parse(npy_bytes("{\"shape\": ( 2 , ), \"fortran_order\":False,\"descr\":\"<u4\"}", raw(v)))
          .count,
      2u);
  EXPECT_EQ(parse(npy_bytes("{'descr': '<u4', 'fortran_order': False, 'shape': (2L,)}  \n", raw(v)))
                .count,
            2u);
  EXPECT_EQ(parse(npy_bytes(dict("<u4", "(0,)"), "")).count, 0u);
}

// ---- reader: malformed files ---------------------------------------------------------

TEST(NpyReader, BadMagic) {
  EXPECT_THAT(header_error("PK\x03\x04 not numpy at all"),
              HasSubstr("tokens.npy is not an npy file (bad magic"));
  EXPECT_THAT(header_error(""), HasSubstr("not an npy file"));
  EXPECT_THAT(header_error(std::string("\x93NUM", 4)), HasSubstr("not an npy file"));
}

TEST(NpyReader, UnsupportedVersion) {
  std::string b = npy_bytes(dict("<u4", "(0,)"), "");
  b[6] = 4;
  EXPECT_THAT(header_error(b), HasSubstr("tokens.npy: unsupported npy version 4.0"));
  b[6] = 1;
  b[7] = 1;
  EXPECT_THAT(header_error(b), HasSubstr("unsupported npy version 1.1"));
}

TEST(NpyReader, TruncatedHeader) {
  EXPECT_THAT(header_error(std::string("\x93NUMPY\x01", 7)),
              HasSubstr("tokens.npy: truncated npy header"));
  EXPECT_THAT(header_error(std::string("\x93NUMPY\x02\x00\x10\x00", 10)),
              HasSubstr("shorter than the 12-byte preamble of version 2.0"));
  const std::string whole = npy_bytes(dict("<u4", "(0,)"), "");
  const std::string msg = header_error(whole.substr(0, 30));
  EXPECT_THAT(msg, HasSubstr("truncated npy header (header length " +
                             std::to_string(whole.size() - 10) + " but only 20 bytes follow)"));
}

TEST(NpyReader, HeaderNotAValidDict) {
  EXPECT_THAT(header_error(npy_bytes("[1, 2]\n", "")),
              HasSubstr("tokens.npy: npy header is not a valid dict"));
  EXPECT_THAT(header_error(npy_bytes("{'descr': '<u4', 'fortran_order': False\n", "")),
              HasSubstr("not a valid dict (expected ',' or '}'"));
  EXPECT_THAT(header_error(npy_bytes("{'descr': '<u4', 'shape': (1,)}\n", std::string(4, '\0'))),
              HasSubstr("missing key 'fortran_order'"));
  EXPECT_THAT(
      header_error(npy_bytes("{'descr': '<u4', 'fortran_order': False, 'shape': (1,), 'x': True}",
                             std::string(4, '\0'))),
      HasSubstr("unknown key 'x'"));
  EXPECT_THAT(header_error(npy_bytes(dict("<u4", "(1)"), std::string(4, '\0'))),
              HasSubstr("'(N)' is an int, not a tuple"));
  EXPECT_THAT(header_error(npy_bytes(dict("<u4", "[1]"), std::string(4, '\0'))),
              HasSubstr("unexpected '['"));
  EXPECT_THAT(header_error(npy_bytes(dict("<u4", "(-1,)"), "")),
              HasSubstr("expected a non-negative integer"));
  EXPECT_THAT(header_error(npy_bytes(dict("<u4", "(99999999999999999999999,)"), "")),
              HasSubstr("integer too large"));
  EXPECT_THAT(header_error(npy_bytes("{'descr': (4,), 'fortran_order': False, 'shape': (0,)}", "")),
              HasSubstr("'descr' is not a string"));
}

TEST(NpyReader, WrongDtypeIsNamed) {
  EXPECT_THAT(
      header_error(npy_bytes(dict("<i8", "(2,)"), std::string(16, '\0'))),
      HasSubstr(
          "tokens.npy has dtype '<i8'; token files must be uint32 ('<u4') or uint16 ('<u2')"));
  EXPECT_THAT(header_error(npy_bytes(dict(">u4", "(2,)"), std::string(8, '\0'))),
              HasSubstr("dtype '>u4'"));
  EXPECT_THAT(header_error(npy_bytes(dict("<f4", "(2,)"), std::string(8, '\0'))),
              HasSubstr("dtype '<f4'"));
}

TEST(NpyReader, NotOneDimensional) {
  EXPECT_THAT(header_error(npy_bytes(dict("<u4", "(2, 3)"), std::string(24, '\0'))),
              HasSubstr("tokens.npy has shape (2, 3); token files must be 1-D"));
  EXPECT_THAT(header_error(npy_bytes(dict("<u4", "()"), std::string(4, '\0'))),
              HasSubstr("has shape ()"));
}

TEST(NpyReader, FortranOrder) {
  EXPECT_THAT(header_error(npy_bytes(dict("<u4", "(2,)", "True"), std::string(8, '\0'))),
              HasSubstr("tokens.npy has fortran_order True"));
}

TEST(NpyReader, DataSizeDisagreesWithShape) {
  EXPECT_THAT(
      header_error(npy_bytes(dict("<u4", "(3,)"), std::string(8, '\0'))),
      HasSubstr(
          "tokens.npy: data section is shorter than its shape says (shape (3,) of '<u4' needs 12 "
          "bytes, the file has 8 after the header)"));
  EXPECT_THAT(header_error(npy_bytes(dict("<u2", "(3,)"), std::string(8, '\0'))),
              HasSubstr("data section is longer than its shape says (shape (3,) of '<u2' needs 6"));
  EXPECT_THAT(header_error(npy_bytes(dict("<u4", "(9223372036854775807,)"), "")),
              HasSubstr("overflows the byte size"));
}

TEST(NpyReader, MissingFileNamesThePath) {
  test::TempDir dir;
  const std::string path = dir.file("absent.npy");
  try {
    NpyFile f(path);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot open " + path));
  }
}

// ---- interop with numpy --------------------------------------------------------------

// A python interpreter that can import numpy, or "" when there is none.
std::string python_with_numpy() {
  for (const char* py : {"/usr/bin/python3", "/opt/olmo2-fixtures-venv/bin/python", "python3"}) {
    const std::string cmd = std::string(py) + " -c 'import numpy' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

// Runs npy_check.py with `args`; returns its exit status and appends its output to `out`.
int run_check(const std::string& python, const std::string& args, std::string& out) {
  const std::string cmd =
      python + " " + test::source_path("tests/io/npy_check.py") + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int raw_status = ::pclose(p);
  return WIFEXITED(raw_status) ? WEXITSTATUS(raw_status) : 128;
}

#define REQUIRE_NUMPY(python)                                                            \
  const std::string python = python_with_numpy();                                        \
  if (python.empty())                                                                    \
  GTEST_SKIP() << "no python with numpy (apt-get install python3-numpy): "  \
                  "numpy interop not checked"

TEST(NpyInterop, NumpyLoadsWhatNpyWriterWrote) {
  REQUIRE_NUMPY(python);
  test::TempDir dir;
  for (uint64_t count : {0ull, 1ull, 100003ull}) {
    const std::string path = dir.file("w" + std::to_string(count) + ".npy");
    uint64_t sum = 0;
    std::string checks;
    {
      NpyWriter w(path);
      std::vector<uint32_t> chunk;
      for (uint64_t i = 0; i < count; ++i) {
        chunk.push_back(static_cast<uint32_t>(i * 2654435761ull));
        sum += chunk.back();
        if (i % 9973 == 0 || i + 1 == count) {
          checks.append(" ")
              .append(std::to_string(i))
              .append("=")
              .append(std::to_string(chunk.back()));
        }
        if (chunk.size() == 4096) {
          w.append(chunk);
          chunk.clear();
        }
      }
      w.append(chunk);
    }
    std::string out;
    EXPECT_EQ(run_check(python,
                        "check " + path + " " + std::to_string(count) + " " + std::to_string(sum) +
                            checks,
                        out),
              0)
        << out;
  }
}

TEST(NpyInterop, ReaderLoadsWhatNumpyWrote) {
  REQUIRE_NUMPY(python);
  test::TempDir dir;
  struct Case {
    const char* dtype;
    const char* version;
    int major;
  };
  const uint64_t count = 5001;
  for (const Case& c : {Case{"uint32", "save", 1}, Case{"uint16", "save", 1},
                        Case{"uint32", "2.0", 2}, Case{"uint16", "3.0", 3}}) {
    const std::string path = dir.file(std::string(c.dtype) + "-" + c.version + ".npy");
    std::string out;
    ASSERT_EQ(run_check(python,
                        std::string("make ") + path + " " + c.dtype + " " + std::to_string(count) +
                            " " + c.version,
                        out),
              0)
        << out;
    NpyFile f(path);
    const bool u16 = std::string(c.dtype) == "uint16";
    EXPECT_EQ(f.dtype(), u16 ? NpyDType::U16 : NpyDType::U32) << path;
    EXPECT_EQ(f.header().major, c.major) << path;
    ASSERT_EQ(f.size(), count) << path;
    std::vector<uint32_t> v(count);
    f.read(0, v);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t expect = (i * 2654435761ull) % (u16 ? 65536ull : 4294967296ull);
      ASSERT_EQ(v[i], expect) << path << " element " << i;
    }
  }
}

}  // namespace
}  // namespace olmo2
