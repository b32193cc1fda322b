// safetensors reader: one test per malformed input (each must raise InputError whose
// message names the fault), exact dtype conversion, and the sharded fixture.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/io/safetensors.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// 8-byte little-endian header length, the header text, then the data section.
std::string file_bytes(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

json entry(const std::string& dtype, const json& shape, const json& begin, const json& end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

using test::input_error;

// The message parse_safetensors_header gives for the in-memory file `bytes`.
std::string header_error(const std::string& bytes) {
  return input_error([&] {
    parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                             "bad.safetensors");
  });
}

std::string header_error(const json& header, const std::string& data) {
  return header_error(file_bytes(header.dump(), data));
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), values.data(), s.size());
  return s;
}

// ---- malformed headers -------------------------------------------------------------

TEST(SafetensorsHeader, FileShorterThanLengthPrefix) {
  const std::string msg = header_error(std::string("\x02\x00\x00", 3));
  EXPECT_THAT(msg, HasSubstr("bad.safetensors"));
  EXPECT_THAT(msg, HasSubstr("3 bytes, shorter than the 8-byte header length"));
  EXPECT_THAT(header_error(std::string()), HasSubstr("0 bytes, shorter than the 8-byte"));
}

TEST(SafetensorsHeader, HeaderLongerThanFile) {
  std::string bytes = file_bytes(R"({"a": {}})");
  bytes.resize(bytes.size() - 3);
  const std::string msg = header_error(bytes);
  EXPECT_THAT(msg, HasSubstr("truncated"));
  EXPECT_THAT(msg, HasSubstr("header length 9 but only 6 bytes follow"));
}

TEST(SafetensorsHeader, HeaderOverLimit) {
  const uint64_t n = kMaxSafetensorsHeader + 1;
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  EXPECT_THAT(header_error(bytes),
              HasSubstr("header length " + std::to_string(n) + " exceeds the 100 MB limit"));
  // A length near 2^64 must not wrap around in the size checks.
  EXPECT_THAT(header_error(std::string(8, '\xff')), HasSubstr("exceeds the 100 MB limit"));
}

TEST(SafetensorsHeader, HeaderNotJson) {
  const std::string msg = header_error(file_bytes("{\"a\": [1, 2"));
  EXPECT_THAT(msg, HasSubstr("bad.safetensors"));
  EXPECT_THAT(msg, HasSubstr("header is not valid JSON"));
  EXPECT_THAT(header_error(file_bytes("")), HasSubstr("header is not valid JSON"));
}

TEST(SafetensorsHeader, HeaderNotAnObject) {
  EXPECT_THAT(header_error(file_bytes("[1, 2, 3]")), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(header_error(file_bytes("\"F32\"")), HasSubstr("header is not a JSON object"));
}

TEST(SafetensorsHeader, EntryMissingDtype) {
  const json h = {{"w", {{"shape", {2}}, {"data_offsets", {0, 8}}}}};
  const std::string msg = header_error(h, std::string(8, '\0'));
  EXPECT_THAT(msg, HasSubstr("tensor \"w\""));
  EXPECT_THAT(msg, HasSubstr("\"dtype\""));
}

TEST(SafetensorsHeader, EntryMissingShape) {
  const json h = {{"w", {{"dtype", "F32"}, {"data_offsets", {0, 8}}}}};
  const std::string msg = header_error(h, std::string(8, '\0'));
  EXPECT_THAT(msg, HasSubstr("tensor \"w\""));
  EXPECT_THAT(msg, HasSubstr("no \"shape\""));
}

TEST(SafetensorsHeader, EntryMissingDataOffsets) {
  const json h = {{"w", {{"dtype", "F32"}, {"shape", {2}}}}};
  const std::string msg = header_error(h, std::string(8, '\0'));
  EXPECT_THAT(msg, HasSubstr("tensor \"w\""));
  EXPECT_THAT(msg, HasSubstr("no \"data_offsets\""));
  // A single offset is no pair either.
  const json one = {{"w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0}}}}};
  EXPECT_THAT(header_error(one, std::string(8, '\0')), HasSubstr("no \"data_offsets\" pair"));
}

TEST(SafetensorsHeader, UnknownDtype) {
  const std::string msg = header_error(json{{"w", entry("Q4_K", {2}, 0, 2)}}, std::string(2, '\0'));
  EXPECT_THAT(msg, HasSubstr("tensor \"w\""));
  EXPECT_THAT(msg, HasSubstr("unknown dtype \"Q4_K\""));
}

TEST(SafetensorsHeader, NegativeDataOffset) {
  const std::string msg = header_error(json{{"w", entry("F32", {2}, -4, 4)}}, std::string(8, '\0'));
  EXPECT_THAT(msg, HasSubstr("tensor \"w\""));
  EXPECT_THAT(msg, HasSubstr("negative data offset -4"));
}

TEST(SafetensorsHeader, NonIntegerDataOffset) {
  const std::string msg = header_error(json{{"w", entry("F32", {2}, 0, 8.5)}}, std::string(16, '\0'));
  EXPECT_THAT(msg, HasSubstr("data offset 8.5 that is not an integer"));
}

TEST(SafetensorsHeader, ReversedDataOffsets) {
  const std::string msg = header_error(json{{"w", entry("F32", {1}, 8, 4)}}, std::string(8, '\0'));
  EXPECT_THAT(msg, HasSubstr("tensor \"w\""));
  EXPECT_THAT(msg, HasSubstr("reversed data offsets [8, 4]"));
}

TEST(SafetensorsHeader, DataOffsetsPastEndOfFile) {
  const std::string msg = header_error(json{{"w", entry("F32", {4}, 0, 16)}}, std::string(12, '\0'));
  EXPECT_THAT(msg, HasSubstr("tensor \"w\""));
  EXPECT_THAT(msg, HasSubstr("end 16 is past the end of the data section (12 bytes)"));
}

TEST(SafetensorsHeader, OverlappingByteRanges) {
  const json h = {{"a", entry("F32", {2}, 0, 8)}, {"b", entry("F32", {2}, 4, 12)}};
  const std::string msg = header_error(h, std::string(12, '\0'));
  EXPECT_THAT(msg, HasSubstr("tensors \"a\" and \"b\" overlap"));
  // A range nested inside another, with a disjoint one after both.
  const json nested = {{"big", entry("U8", {10}, 0, 10)}, {"in", entry("U8", {2}, 3, 5)},
                       {"after", entry("U8", {2}, 10, 12)}};
  EXPECT_THAT(header_error(nested, std::string(12, '\0')),
              HasSubstr("tensors \"big\" and \"in\" overlap"));
}

TEST(SafetensorsHeader, ByteRangeDisagreesWithShape) {
  const std::string msg = header_error(json{{"w", entry("F32", {3}, 0, 8)}}, std::string(8, '\0'));
  EXPECT_THAT(msg, HasSubstr("tensor \"w\""));
  EXPECT_THAT(msg, HasSubstr("holds 8 bytes but shape [3] of F32 needs 12"));
}

TEST(SafetensorsHeader, ShapeElementCountOverflows) {
  // 2^32 · 2^32 = 2^64 wraps uint64; (2^63 − 1) · 2 exceeds int64; 2^64 − 1 alone exceeds int64.
  const std::vector<json> shapes = {json{4294967296ull, 4294967296ull},
                                    json{9223372036854775807ull, 2},
                                    json{18446744073709551615ull}};
  for (const json& shape : shapes) {
    const std::string msg = header_error(json{{"w", entry("F32", shape, 0, 0)}}, "");
    EXPECT_THAT(msg, HasSubstr("tensor \"w\" shape " + shape.dump() + " overflows the element count"));
  }
  // The element count fits but the byte count (2^62 · 4) does not.
  const std::string msg = header_error(json{{"w", entry("F32", {4611686018427387904ull}, 0, 0)}}, "");
  EXPECT_THAT(msg, HasSubstr("overflows the byte size"));
}

TEST(SafetensorsHeader, ShapeEntryNotANonNegativeInteger) {
  EXPECT_THAT(header_error(json{{"w", entry("F32", {2, -1}, 0, 0)}}, ""),
              HasSubstr("shape entry -1 that is not a non-negative integer"));
  EXPECT_THAT(header_error(json{{"w", entry("F32", {"2"}, 0, 8)}}, std::string(8, '\0')),
              HasSubstr("shape entry \"2\""));
}

TEST(SafetensorsHeader, DeeplyNestedValuesAreRefusedUpFront) {
  // 200000 levels of nesting would cost gigabytes to parse and overflow the stack in a
  // recursive dump: the parser refuses anything deeper than 16 levels.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const auto tensor = [](const std::string& shape, const std::string& offsets) {
    return R"({"w": {"dtype": "F32", "shape": )" + shape + R"(, "data_offsets": )" + offsets + "}}";
  };
  for (const std::string& h : {deep, tensor("[" + deep + "]", "[0, 0]"), tensor("[]", "[" + deep + ", 4]"),
                               std::string(R"({"__metadata__": )") + deep + "}"}) {
    EXPECT_THAT(header_error(file_bytes(h)), HasSubstr("header nests deeper than 16 levels"));
  }
  // Shallow nesting reaches the field checks, whose messages do not dump containers.
  const std::string nested = "[[[[1]]]]";
  EXPECT_THAT(header_error(file_bytes(tensor("[" + nested + "]", "[0, 0]"))),
              HasSubstr("tensor \"w\" has a shape entry [...] that is not a non-negative integer"));
  EXPECT_THAT(header_error(file_bytes(tensor("[4294967296, 4294967296, " + nested + "]", "[0, 0]"))),
              HasSubstr("has a shape entry [...]"));
  EXPECT_THAT(header_error(file_bytes(tensor("[]", "[" + nested + ", 4]"))),
              HasSubstr("has a data offset [...] that is not an integer"));
}

// ---- loading -------------------------------------------------------------------------

// A model.safetensors with one tensor of each loadable dtype plus an I64 one; the F32
// tensor starts at an odd offset so its read is unaligned.
class SafetensorsLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x0001, 0x7BFF};
    const std::vector<uint16_t> bf16 = {0x3F80, 0xC000, 0x0001};
    const std::vector<float> f32 = {1.5f, -0.25f, 3.0e-38f, 65504.0f, 1e30f, -7.0f};
    const std::vector<int64_t> i64 = {1, -2};
    std::string data = raw(f16) + raw(bf16) + "z" + raw(f32) + raw(i64);  // 8 + 6 + 1 + 24 + 16
    const json h = {{"__metadata__", {{"format", "pt"}}},
                    {"f16", entry("F16", {2, 2}, 0, 8)},
                    {"bf16", entry("BF16", {3}, 8, 14)},
                    {"f32", entry("F32", {2, 3}, 15, 39)},
                    {"ids", entry("I64", {2}, 39, 55)},
                    {"empty", entry("F32", {0, 4}, 55, 55)}};
    write_file(dir_.file("model.safetensors"), file_bytes(h.dump(), data));
  }
  test::TempDir dir_;
};

TEST_F(SafetensorsLoad, ConvertsF32Bf16F16Exactly) {
  const Checkpoint ckpt = Checkpoint::open(dir_.path());
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"bf16", "empty", "f16", "f32", "ids"}));

  const Tensor f16 = ckpt.load_f32("f16", {2, 2});
  EXPECT_EQ(f16.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(f16.f32()[0], 1.0f);
  EXPECT_EQ(f16.f32()[1], -2.0f);
  EXPECT_EQ(f16.f32()[2], 5.960464477539063e-08f);  // 2^-24, the smallest f16 subnormal
  EXPECT_EQ(f16.f32()[3], 65504.0f);

  const Tensor bf16 = ckpt.load_f32("bf16", {3});
  EXPECT_EQ(bf16.f32()[0], 1.0f);
  EXPECT_EQ(bf16.f32()[1], -2.0f);
  EXPECT_EQ(bf16.f32()[2], std::ldexp(1.0f, -133));  // smallest bf16 subnormal

  const Tensor f32 = ckpt.load_f32("f32", {2, 3});
  const std::vector<float> want = {1.5f, -0.25f, 3.0e-38f, 65504.0f, 1e30f, -7.0f};
  EXPECT_EQ(std::vector<float>(f32.f32(), f32.f32() + 6), want);

  const TensorInfo& info = ckpt.info("bf16");
  EXPECT_EQ(info.dtype_tag, "BF16");
  EXPECT_TRUE(info.supported);
  EXPECT_EQ(info.dtype, DType::BF16);
  EXPECT_EQ(info.begin, 8u);
  EXPECT_EQ(info.end, 14u);
}

TEST_F(SafetensorsLoad, EmptyTensorLoads) {
  const Tensor t = Checkpoint::open(dir_.path()).load_f32("empty", {0, 4});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{0, 4}));
}

TEST_F(SafetensorsLoad, UnsupportedDtypeNamesTensorAndDtype) {
  const Checkpoint ckpt = Checkpoint::open(dir_.path());
  EXPECT_EQ(ckpt.info("ids").dtype_tag, "I64");
  EXPECT_FALSE(ckpt.info("ids").supported);
  const std::string msg = input_error([&] { ckpt.load_f32("ids", {2}); });
  EXPECT_THAT(msg, HasSubstr("tensor ids has dtype I64"));
}

TEST_F(SafetensorsLoad, MissingTensorIsNamed) {
  const Checkpoint ckpt = Checkpoint::open(dir_.path());
  EXPECT_FALSE(ckpt.has("model.norm.weight"));
  const std::string msg = input_error([&] { ckpt.load_f32("model.norm.weight", {4}); });
  EXPECT_THAT(msg, HasSubstr("has no tensor model.norm.weight"));
  EXPECT_THAT(msg, HasSubstr(dir_.path()));
}

TEST_F(SafetensorsLoad, WrongShapeNamesTensorExpectedAndFound) {
  const Checkpoint ckpt = Checkpoint::open(dir_.path());
  const std::string msg = input_error([&] { ckpt.load_f32("f32", {3, 2}); });
  EXPECT_THAT(msg, HasSubstr("tensor f32 has shape [2, 3], expected [3, 2]"));
}

// ---- checkpoint directories ------------------------------------------------------------

// A directory with one shard "a.safetensors" holding the F32 tensor "w" of shape [2].
class SafetensorsIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_.file("a.safetensors"),
               file_bytes(json{{"w", entry("F32", {2}, 0, 8)}}.dump(), raw(std::vector<float>{1, 2})));
  }
  void write_index(const std::string& text) { write_file(dir_.file("model.safetensors.index.json"), text); }
  test::TempDir dir_;
};

TEST_F(SafetensorsIndex, ShardedIndexOpens) {
  write_index(R"({"metadata": {}, "weight_map": {"w": "a.safetensors"}})");
  const Tensor w = Checkpoint::open(dir_.path()).load_f32("w", {2});
  EXPECT_EQ(w.f32()[1], 2.0f);
}

TEST_F(SafetensorsIndex, IndexNotJson) {
  write_index(R"({"weight_map": {"w": "a.safetensors")");
  const std::string msg = input_error([&] { Checkpoint::open(dir_.path()); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors.index.json: not valid JSON"));
}

TEST_F(SafetensorsIndex, IndexWithoutWeightMap) {
  write_index(R"({"metadata": {}})");
  EXPECT_THAT(input_error([&] { Checkpoint::open(dir_.path()); }), HasSubstr("no \"weight_map\" object"));
}

TEST(SafetensorsCheckpoint, IndexPointsOutsideDirectory) {
  // ../x.safetensors exists and is valid, yet must be refused: it is not inside the model dir.
  test::TempDir outer;
  const std::string dir = outer.file("model");
  std::filesystem::create_directory(dir);
  write_file(outer.file("x.safetensors"),
             file_bytes(json{{"w", entry("F32", {1}, 0, 4)}}.dump(), std::string(4, '\0')));
  write_file(dir + "/model.safetensors.index.json", R"({"weight_map": {"w": "../x.safetensors"}})");
  const std::string msg = input_error([&] { Checkpoint::open(dir); });
  EXPECT_THAT(msg, HasSubstr("tensor w points to \"../x.safetensors\""));
  EXPECT_THAT(msg, HasSubstr("not a file name inside " + dir));
  write_file(dir + "/model.safetensors.index.json", R"({"weight_map": {"w": "/etc/passwd"}})");
  EXPECT_THAT(input_error([&] { Checkpoint::open(dir); }), HasSubstr("\"/etc/passwd\""));
}

TEST_F(SafetensorsIndex, IndexNamesTensorItsShardLacks) {
  write_index(R"({"weight_map": {"w": "a.safetensors", "v": "a.safetensors"}})");
  const std::string msg = input_error([&] { Checkpoint::open(dir_.path()); });
  EXPECT_THAT(msg, HasSubstr("places tensor v in a.safetensors, which does not hold it"));
}

TEST_F(SafetensorsIndex, IndexNamesMissingShard) {
  write_index(R"({"weight_map": {"w": "b.safetensors"}})");
  EXPECT_THAT(input_error([&] { Checkpoint::open(dir_.path()); }),
              HasSubstr("cannot open " + dir_.file("b.safetensors")));
}

TEST(SafetensorsCheckpoint, DirectoryWithNeitherFile) {
  test::TempDir dir;
  write_file(dir.file("config.json"), "{}");
  const std::string msg = input_error([&] { Checkpoint::open(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("no model.safetensors or model.safetensors.index.json in " + dir.path()));
}

TEST(SafetensorsCheckpoint, ShardedFixtureHasTheIndexNames) {
  const std::string dir = test::source_path("tests/golden/fixtures/sharded-f32");
  std::ifstream in(dir + "/model.safetensors.index.json");
  ASSERT_TRUE(in) << dir;
  const json index = json::parse(in);
  std::vector<std::string> want;
  for (const auto& [name, file] : index.at("weight_map").items()) want.push_back(name);
  std::sort(want.begin(), want.end());

  const Checkpoint ckpt = Checkpoint::open(dir);
  std::vector<std::string> got = ckpt.names();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  ASSERT_FALSE(got.empty());
  for (const std::string& name : got) {
    const TensorInfo& info = ckpt.info(name);
    EXPECT_EQ(info.dtype_tag, "F32") << name;
    EXPECT_EQ(ckpt.load_f32(name, info.shape).shape(), info.shape) << name;
  }
}

TEST(SafetensorsCheckpoint, Bf16FixtureLoadsBf16RepresentableValues) {
  const Checkpoint ckpt = Checkpoint::open(test::source_path("tests/golden/fixtures/gqa-bf16"));
  const TensorInfo& info = ckpt.info("lm_head.weight");
  EXPECT_EQ(info.dtype_tag, "BF16");
  const Tensor t = ckpt.load_f32("lm_head.weight", info.shape);
  bool any_nonzero = false;
  for (int64_t i = 0; i < t.numel(); ++i) {
    ASSERT_EQ(round_bf16(t.f32()[i]), t.f32()[i]) << i;
    any_nonzero |= t.f32()[i] != 0.0f;
  }
  EXPECT_TRUE(any_nonzero);
}

}  // namespace
}  // namespace olmo2

namespace olmo2 {
namespace {

TEST(CheckpointSlice, RowsAndColumnsEqualTheSameSliceOfTheWholeTensor) {
  const Checkpoint ckpt = Checkpoint::open(test::source_path("tests/golden/fixtures/gqa-bf16"));
  const std::string name = "model.layers.0.mlp.down_proj.weight";  // [64, 96] bf16
  const std::vector<int64_t> shape = {64, 96};
  const Tensor whole = ckpt.load_f32(name, shape);
  const Tensor rows = ckpt.load_f32_slice(name, shape, 0, 16, 48);
  ASSERT_EQ(rows.shape(), (std::vector<int64_t>{32, 96}));
  for (int64_t i = 0; i < rows.numel(); ++i) ASSERT_EQ(rows.f32()[i], whole.f32()[16 * 96 + i]);
  const Tensor cols = ckpt.load_f32_slice(name, shape, 1, 24, 72);
  ASSERT_EQ(cols.shape(), (std::vector<int64_t>{64, 48}));
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 48; ++c) ASSERT_EQ(cols.f32()[r * 48 + c], whole.f32()[r * 96 + 24 + c]);
  const Tensor norm = ckpt.load_f32_slice("model.norm.weight", {64}, 0, 60, 64);
  EXPECT_EQ(norm.numel(), 4);
  EXPECT_THROW(ckpt.load_f32_slice(name, shape, 1, 90, 100), ShapeError);
  EXPECT_THROW(ckpt.load_f32_slice(name, {96, 64}, 0, 0, 1), InputError);  // wrong full shape
}

}  // namespace
}  // namespace olmo2
