// XXH3-128 checksums of checkpoint files: known answers printed by `xxhsum -H2` (xxHash
// 0.8.1's command-line tool), chunked updates equal to one update, and file read errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/io/file_checksum.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

TEST(Xxh3Stream, KnownAnswersOfXxhsum) {
  // printf '' | xxhsum -H2 ; printf 'olmo2' | xxhsum -H2
  EXPECT_EQ(Xxh3Stream().hex(), "99aa06d3014798d86001c324468d497f");
  Xxh3Stream h;
  h.update("olmo2", 5);
  EXPECT_EQ(h.hex(), "dfe08d71aadd813bc21f3cce7a1409a3");
  EXPECT_EQ(h.bytes(), 5u);
}

TEST(Xxh3Stream, ChunksHashLikeOneUpdate) {
  std::vector<unsigned char> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  Xxh3Stream whole, pieces;
  whole.update(data.data(), data.size());
  for (size_t at = 0, step = 1; at < data.size(); at += step, step = step * 3 % 7919 + 1) {
    pieces.update(data.data() + at, std::min(step, data.size() - at));
  }
  EXPECT_EQ(whole.hex(), pieces.hex());
  EXPECT_EQ(pieces.bytes(), data.size());
}

TEST(ChecksumFile, TenMillionZerosAsXxhsum) {
  test::TempDir tmp;
  const std::string path = tmp.path() + "/zeros.bin";
  {
    std::ofstream out(path, std::ios::binary);
    const std::vector<char> zeros(10000000, 0);
    out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  // head -c 10000000 /dev/zero | xxhsum -H2 (the file spans three 4 MiB reads)
  const FileChecksum sum = checksum_file(path);
  EXPECT_EQ(sum.bytes, 10000000u);
  EXPECT_EQ(sum.xxh3_128, "2a77eabd7af0ededb00ea125ecd61934");
}

TEST(ChecksumFile, MissingFileIsAnInputErrorNamingIt) {
  try {
    checksum_file("/nonexistent/olmo2/model.safetensors");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("/nonexistent/olmo2/model.safetensors"));
  }
}

}  // namespace
}  // namespace olmo2
