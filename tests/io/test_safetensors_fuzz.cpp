// Deterministic fuzzing of the safetensors reader: random bytes, mutated valid files and
// structurally random headers. Every input must either parse into a consistent table or
// raise InputError; any other exception, a crash or (in the sanitizer build) an
// out-of-bounds read fails. Built twice: plainly and with ASan + UBSan (sanitize.cmake).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/dtype.h"
#include "core/error.h"
#include "runtime/io/safetensors.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using Rng = std::mt19937_64;

// Element sizes of the format's dtype tags, kept apart from the reader's own table.
const std::map<std::string, uint64_t>& known_tags() {
  static const std::map<std::string, uint64_t> tags = {
      {"F64", 8},  {"F32", 4},  {"F16", 2}, {"BF16", 2}, {"I64", 8},  {"I32", 4},
      {"I16", 2},  {"I8", 1},   {"U64", 8}, {"U32", 4},  {"U16", 2},  {"U8", 1},
      {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  return tags;
}

uint64_t pick(Rng& rng, uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); }
bool chance(Rng& rng, double p) { return std::bernoulli_distribution(p)(rng); }

template <typename T>
const T& pick_from(Rng& rng, const std::vector<T>& v) { return v[pick(rng, v.size())]; }

std::string with_length_prefix(uint64_t n, const std::string& rest) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + rest;
}

struct Tally {
  int parsed = 0;
  int rejected = 0;
};

// Parses `file` from an exactly-sized heap copy (so ASan sees any read past its end),
// checks that a parsed table is self-consistent and reads every loadable tensor.
void check_case(const std::string& file, const std::string& label, Tally* tally) {
  SCOPED_TRACE(label);
  const size_t size = file.size();
  std::unique_ptr<uint8_t[]> bytes(new uint8_t[size]);
  if (size) std::memcpy(bytes.get(), file.data(), size);
  std::map<std::string, TensorInfo> tensors;
  try {
    tensors = parse_safetensors_header(bytes.get(), size, "fuzz.safetensors");
  } catch (const InputError& e) {
    ++tally->rejected;
    EXPECT_THAT(e.what(), ::testing::HasSubstr("fuzz.safetensors"));
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-InputError exception: " << e.what();
    return;
  } catch (...) {
    ADD_FAILURE() << "non-std exception";
    return;
  }
  ++tally->parsed;
  ASSERT_GE(size, 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  ASSERT_LE(n, size - 8);
  const uint64_t data_size = size - 8 - n;
  const uint8_t* data = bytes.get() + 8 + n;
  std::vector<const TensorInfo*> nonempty;
  for (const auto& [name, t] : tensors) {
    ASSERT_EQ(name, t.name);
    ASSERT_NE(name, "__metadata__");
    ASSERT_EQ(known_tags().count(t.dtype_tag), 1u) << t.dtype_tag;
    ASSERT_LE(t.begin, t.end) << name;
    ASSERT_LE(t.end, data_size) << name;
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      ASSERT_GE(d, 0) << name;
      numel *= static_cast<uint64_t>(d);  // cannot wrap: numel·size equals a range length
    }
    ASSERT_EQ(numel * known_tags().at(t.dtype_tag), t.end - t.begin) << name;
    if (t.end > t.begin) nonempty.push_back(&t);
    if (t.supported && numel > 0) {
      std::vector<float> out(numel);
      convert_to_f32(data + t.begin, t.dtype, out.data(), numel);
    }
  }
  for (size_t i = 0; i < nonempty.size(); ++i) {
    for (size_t j = i + 1; j < nonempty.size(); ++j) {
      const bool disjoint = nonempty[i]->end <= nonempty[j]->begin || nonempty[j]->end <= nonempty[i]->begin;
      ASSERT_TRUE(disjoint) << nonempty[i]->name << " and " << nonempty[j]->name;
    }
  }
}

// Literal JSON texts that stress numbers and types where the reader expects integers.
const std::vector<std::string>& odd_literals() {
  static const std::vector<std::string> lits = {
      "0", "1", "2", "3", "4", "8", "16", "-1", "-0", "1.0", "0.5", "1e3", "-1e3", "1e400", "-1e400",
      "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
      "18446744073709551615", "18446744073709551616", "99999999999999999999999", "\"8\"", "\"\"",
      "null", "true", "false", "[]", "{}", "[0]", "[0, 8]", "[[1]]", "{\"a\": 1}"};
  return lits;
}

// One of odd_literals(), or rarely an array nested deep enough to break recursive code.
std::string odd_literal(Rng& rng) {
  static const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  return chance(rng, 0.002) ? deep : pick_from(rng, odd_literals());
}

using Fields = std::vector<std::pair<std::string, std::string>>;

std::string object_text(const Fields& fields) {
  std::string out = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    out += (i ? ", \"" : "\"") + fields[i].first + "\": " + fields[i].second;
  }
  return out + "}";
}

// A random header that is valid most of the time, with a few fields replaced, dropped or
// made inconsistent. Returns the file (length prefix + header + data section).
std::string structured_file(Rng& rng) {
  std::vector<std::string> tags;
  for (const auto& [tag, size] : known_tags()) tags.push_back(tag);
  const std::vector<std::string> bad_tags = {"f32", "", "F32 ", "Q4_K", "FP8", "F8_E4M3FNUZ", "bf16"};
  const double corrupt = pick_from(rng, std::vector<double>{0.0, 0.05, 0.2, 0.6});
  auto add = [&](Fields* fields, const std::string& key, const std::string& value) {
    if (chance(rng, corrupt / 4)) return;  // drop the field
    fields->emplace_back(key, chance(rng, corrupt / 3) ? odd_literal(rng) : value);
  };

  Fields top;
  if (chance(rng, 0.3)) add(&top, "__metadata__", R"({"format": "pt"})");
  uint64_t cursor = pick(rng, 4);
  uint64_t prev_begin = 0;
  const uint64_t count = pick(rng, 6);
  for (uint64_t i = 0; i < count; ++i) {
    const std::string tag = chance(rng, corrupt / 3) ? pick_from(rng, bad_tags) : pick_from(rng, tags);
    std::string shape = "[";
    uint64_t numel = 1;
    const uint64_t rank = pick(rng, 4);
    for (uint64_t d = 0; d < rank; ++d) {
      const uint64_t v = pick(rng, 5);
      numel *= v;
      shape += (d ? ", " : "") + std::to_string(v);
    }
    if (chance(rng, corrupt / 3)) shape += (rank ? ", " : "") + odd_literal(rng);
    shape += "]";
    const uint64_t elem = known_tags().count(tag) ? known_tags().at(tag) : 1;
    uint64_t begin = chance(rng, corrupt / 3) ? prev_begin : cursor;  // maybe overlap
    uint64_t end = begin + numel * elem + (chance(rng, corrupt / 3) ? pick(rng, 3) : 0);
    prev_begin = begin;
    cursor = std::max(cursor, end) + (chance(rng, 0.2) ? pick(rng, 3) : 0);
    if (chance(rng, corrupt / 4)) std::swap(begin, end);
    std::string b = std::to_string(begin), e = std::to_string(end);
    if (chance(rng, corrupt / 4)) (chance(rng, 0.5) ? b : e) = odd_literal(rng);

    Fields entry;
    add(&entry, "dtype", "\"" + tag + "\"");
    add(&entry, "shape", shape);
    add(&entry, "data_offsets", chance(rng, corrupt / 4) ? "[" + b + "]" : "[" + b + ", " + e + "]");
    const std::string name = chance(rng, 0.1) ? "w" : std::string("t").append(std::to_string(i));  // maybe a duplicate key
    top.emplace_back(name, object_text(entry));
  }
  const std::string header = chance(rng, corrupt / 4) ? odd_literal(rng) : object_text(top);

  const uint64_t data_size = chance(rng, corrupt / 2) ? pick(rng, cursor + 4) : cursor;
  std::string data(data_size, '\0');
  for (char& c : data) c = static_cast<char>(pick(rng, 256));
  return with_length_prefix(header.size(), header + data);
}

void mutate(Rng& rng, std::string* s) {
  const std::string json_chars = "{}[]\",:0123456789-.eE \\tfn";
  const uint64_t ops = 1 + pick(rng, 4);
  for (uint64_t k = 0; k < ops; ++k) {
    const size_t pos = s->empty() ? 0 : pick(rng, s->size());
    const char c = chance(rng, 0.5) ? json_chars[pick(rng, json_chars.size())] : static_cast<char>(pick(rng, 256));
    switch (pick(rng, 4)) {
      case 0: if (!s->empty()) (*s)[pos] = c; break;
      case 1: s->insert(pos, 1, c); break;
      case 2: if (!s->empty()) s->erase(pos, 1 + pick(rng, 4)); break;
      default: if (!s->empty()) (*s)[pos] ^= static_cast<char>(1u << pick(rng, 8)); break;
    }
  }
}

TEST(SafetensorsFuzz, RandomBytes) {
  Rng rng(0x5afe7e45);
  Tally tally;
  for (int i = 0; i < 1500; ++i) {
    std::string file(pick(rng, 80), '\0');
    for (char& c : file) c = static_cast<char>(pick(rng, 256));
    // Half the cases declare a header length that fits the buffer, so parsing starts.
    if (file.size() >= 8 && chance(rng, 0.5)) file = with_length_prefix(pick(rng, file.size() - 7), file.substr(8));
    if (chance(rng, 0.1) && !file.empty()) file[8 % file.size()] = '{';
    check_case(file, "random bytes case " + std::to_string(i), &tally);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
  EXPECT_EQ(tally.parsed + tally.rejected, 1500);
  EXPECT_GT(tally.rejected, 1000);
}

TEST(SafetensorsFuzz, MutatedValidFiles) {
  Rng rng(20240611);
  Tally tally;
  for (int i = 0; i < 2000; ++i) {
    // A valid base file: structured_file with no corruption, re-drawn until it parses.
    std::string base;
    for (;;) {
      base = structured_file(rng);
      Tally probe;
      check_case(base, "base", &probe);
      if (probe.parsed) break;
    }
    uint64_t n = 0;
    for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<uint8_t>(base[b]);
    std::string header = base.substr(8, n), data = base.substr(8 + n);
    std::string file;
    switch (pick(rng, 4)) {
      case 0:  // mutate the header text, keep the length prefix honest
        mutate(rng, &header);
        file = with_length_prefix(header.size(), header + data);
        break;
      case 1:  // mutate the header text but keep the old length
        mutate(rng, &header);
        file = with_length_prefix(n, header + data);
        break;
      case 2:  // mutate anywhere, length prefix included
        file = base;
        mutate(rng, &file);
        break;
      default:  // truncate or extend the data section
        file = base.substr(0, pick(rng, base.size() + 1));
        if (chance(rng, 0.3)) file += std::string(pick(rng, 16), '\x7f');
        break;
    }
    check_case(file, "mutation case " + std::to_string(i), &tally);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
  EXPECT_GT(tally.parsed, 50);
  EXPECT_GT(tally.rejected, 500);
}

TEST(SafetensorsFuzz, StructuredHeaders) {
  Rng rng(77);
  Tally tally;
  for (int i = 0; i < 3000; ++i) {
    check_case(structured_file(rng), "structured case " + std::to_string(i), &tally);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
  EXPECT_GT(tally.parsed, 500);
  EXPECT_GT(tally.rejected, 500);
}

// The same reader on real files, through the memory map, including an empty file.
TEST(SafetensorsFuzz, RealFiles) {
  test::TempDir dir;
  Rng rng(4242);
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream f(dir.file(name), std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return dir.file(name);
  };
  auto open = [](const std::string& path) -> int {  // 1 parsed, 0 InputError
    try {
      SafetensorsFile f(path);
      for (const auto& [name, t] : f.tensors()) {
        if (t.supported && t.end > t.begin) {
          std::vector<float> out((t.end - t.begin) / dtype_size(t.dtype));
          convert_to_f32(f.data(t), t.dtype, out.data(), out.size());
        }
      }
      return 1;
    } catch (const InputError&) {
      return 0;
    }
  };
  EXPECT_EQ(open(write("empty.safetensors", "")), 0);
  EXPECT_EQ(open(write("short.safetensors", "\x01\x00")), 0);
  EXPECT_EQ(open(write("huge-length.safetensors", std::string(8, '\xff'))), 0);
  EXPECT_EQ(open(write("nothing.safetensors", with_length_prefix(2, "{}"))), 1);
  EXPECT_EQ(open(dir.file("missing.safetensors")), 0);
  EXPECT_EQ(open(dir.path()), 0);  // a directory is not a regular file
  int parsed = 0;
  for (int i = 0; i < 40; ++i) {
    std::string file = structured_file(rng);
    if (i % 2) mutate(rng, &file);
    parsed += open(write("case" + std::to_string(i) + ".safetensors", file));
  }
  EXPECT_GT(parsed, 0);

  // A model directory with an empty tensor next to a real one loads both.
  const std::string header =
      R"({"e": {"dtype": "BF16", "shape": [0], "data_offsets": [0, 0]},)"
      R"( "w": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}})";
  write("model.safetensors", with_length_prefix(header.size(), header + std::string("\x80\x3f", 2)));
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  EXPECT_EQ(ckpt.load_f32("e", {0}).numel(), 0);
  EXPECT_EQ(ckpt.load_f32("w", {1}).f32()[0], 1.0f);
}

}  // namespace
}  // namespace olmo2
