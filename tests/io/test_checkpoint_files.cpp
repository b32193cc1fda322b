// A checkpoint's file list (training_state.json "files") and its verification: size and
// XXH3-128 of every listed file, refused naming the file, expected and found.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/io/checkpoint_files.h"
#include "runtime/io/file_checksum.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

/// A directory with the three files a loader reads and a training_state.json listing them.
struct Listed {
  test::TempDir dir;
  Listed() {
    write(dir.file("model.safetensors"), std::string(5000, 'a'));
    write(dir.file("config.json"), "0123456789");
    write(dir.file("training_state.safetensors"), "moments");
    json files = json::object();
    for (const char* n : {"model.safetensors", "config.json", "training_state.safetensors"}) {
      const FileChecksum c = checksum_file(dir.file(n));
      files[n] = {{"bytes", c.bytes}, {"xxh3_128", c.xxh3_128}};
    }
    write(dir.file("training_state.json"), json{{"format_version", 1}, {"step", 0}, {"files", files}}.dump());
  }
  std::string error() { return test::input_error([&] { verify_listed_files(dir.path(), read_file_listing(dir.path())); }); }
};

TEST(CheckpointFiles, IntactFilesPass) {
  Listed l;
  const FileListing listing = read_file_listing(l.dir.path());
  EXPECT_TRUE(listing.is_checkpoint);
  EXPECT_TRUE(listing.has_checksums);
  ASSERT_EQ(listing.files.size(), 3u);
  EXPECT_EQ(listing.files[1].name, "model.safetensors");  // in name order
  EXPECT_EQ(listing.files[1].bytes, 5000u);
  EXPECT_NO_THROW(verify_listed_files(l.dir.path(), listing));
}

TEST(CheckpointFiles, OneChangedByteIsNamedWithBothChecksums) {
  Listed l;
  const std::string expected = read_file_listing(l.dir.path()).files[1].xxh3_128;
  std::string bytes(5000, 'a');
  bytes[4321] = 'b';  // same size, one byte differs ("garbage" of the right length)
  write(l.dir.file("model.safetensors"), bytes);
  const std::string found = checksum_file(l.dir.file("model.safetensors")).xxh3_128;
  ASSERT_NE(found, expected);
  const std::string e = l.error();
  EXPECT_THAT(e, HasSubstr("model.safetensors: expected 5000 bytes with xxh3_128 " + expected + ", found 5000 bytes with xxh3_128 " +
                           found));
}

TEST(CheckpointFiles, TruncatedMissingAndUnlistedFiles) {
  Listed l;
  write(l.dir.file("config.json"), "01234");
  EXPECT_THAT(l.error(), HasSubstr("config.json: expected 10 bytes with xxh3_128"));
  EXPECT_THAT(l.error(), HasSubstr("found 5 bytes (truncated)"));
  write(l.dir.file("config.json"), "0123456789");
  std::filesystem::remove(l.dir.file("model.safetensors"));
  EXPECT_THAT(l.error(), HasSubstr("model.safetensors is missing (training_state.json lists it: 5000 bytes)"));
  write(l.dir.file("model.safetensors"), std::string(5000, 'a'));
  write(l.dir.file("extrmodel.safetensors"), "not listed");  // files beyond the list are not checked
  EXPECT_NO_THROW(verify_listed_files(l.dir.path(), read_file_listing(l.dir.path())));
}

TEST(CheckpointFiles, SharesSplitTheFilesOverRanks) {
  Listed l;
  write(l.dir.file("model.safetensors"), std::string(5000, 'b'));
  const FileListing listing = read_file_listing(l.dir.path());
  // Name order: config.json, model.safetensors, training_state.safetensors.
  EXPECT_NO_THROW(verify_listed_files(l.dir.path(), listing, {0, 2}));  // the first and the third
  EXPECT_THAT(test::input_error([&] { verify_listed_files(l.dir.path(), listing, {1, 2}); }),
              HasSubstr("model.safetensors"));
  EXPECT_THAT(test::input_error([&] { verify_model_directory(l.dir.path(), {1, 2}, nullptr); }),
              HasSubstr("--model " + l.dir.path() + ": model.safetensors: expected 5000 bytes"));
}

// A list that leaves out a file the loader reads (edited, or emptied) is refused: leaving
// a file out must not switch its verification off. Shards come from the index.
TEST(CheckpointFiles, AFileTheLoaderReadsMustBeListed) {
  Listed l;
  json state;
  std::ifstream(l.dir.file("training_state.json")) >> state;
  json edited = state;
  edited["files"].erase("model.safetensors");
  write(l.dir.file("training_state.json"), edited.dump());
  EXPECT_THAT(l.error(), HasSubstr("model.safetensors is not in training_state.json's \"files\" (2 listed)"));
  edited["files"] = json::object();
  write(l.dir.file("training_state.json"), edited.dump());
  EXPECT_THAT(l.error(), HasSubstr("config.json is not in training_state.json's \"files\" (0 listed)"));
  // Sharded: every file the index names must be listed too.
  write(l.dir.file("training_state.json"), state.dump());
  write(l.dir.file("model.safetensors.index.json"),
        R"({"weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}})");
  EXPECT_EQ(files_a_loader_reads(l.dir.path()),
            (std::vector<std::string>{"config.json", "training_state.safetensors", "model.safetensors.index.json",
                                      "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  EXPECT_THAT(l.error(), HasSubstr("model.safetensors.index.json is not in training_state.json's \"files\""));
}

TEST(CheckpointFiles, OldCheckpointWarnsOncePlainModelDirectoryIsSilent) {
  test::TempDir plain;
  std::ostringstream warn;
  EXPECT_FALSE(read_file_listing(plain.path()).is_checkpoint);
  verify_model_directory(plain.path(), {}, &warn);
  EXPECT_EQ(warn.str(), "");
  write(plain.file("training_state.json"), R"({"format_version": 1, "step": 3, "state": {}})");
  const FileListing old = read_file_listing(plain.path());
  EXPECT_TRUE(old.is_checkpoint);
  EXPECT_FALSE(old.has_checksums);
  verify_model_directory(plain.path(), {}, &warn);
  EXPECT_EQ(warn.str(), "warning: " + plain.file("training_state.json") +
                            " lists no checksums (a checkpoint written before they existed): its files are not verified\n");
}

TEST(CheckpointFiles, MalformedListIsRefusedNamingTheEntry) {
  test::TempDir d;
  write(d.file("training_state.json"), R"({"files": {"../escape": {"bytes": 1, "xxh3_128": "00000000000000000000000000000000"}}})");
  EXPECT_THAT(test::input_error([&] { read_file_listing(d.path()); }), HasSubstr("\"files\" entry \"../escape\""));
  write(d.file("training_state.json"), R"({"files": {"a": {"bytes": -1, "xxh3_128": "00000000000000000000000000000000"}}})");
  EXPECT_THAT(test::input_error([&] { read_file_listing(d.path()); }), HasSubstr("\"files\" entry \"a\""));
  write(d.file("training_state.json"), R"({"files": {"a": {"bytes": 1, "xxh3_128": "xyz"}}})");
  EXPECT_THAT(test::input_error([&] { read_file_listing(d.path()); }), HasSubstr("\"files\" entry \"a\""));
  write(d.file("training_state.json"), "{not json");
  EXPECT_THAT(test::input_error([&] { read_file_listing(d.path()); }), HasSubstr("is not valid JSON"));
}

}  // namespace
}  // namespace olmo2
