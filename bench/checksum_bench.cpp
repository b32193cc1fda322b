// Cost of checkpoint verification (docs/architecture.md §7 "Checkpoint integrity"): times
// checksum_file — the streamed XXH3-128 a resume or `--model` load runs on every listed
// file — on each FILE given, `--repeat N` times (default 3), and prints bytes, seconds and
// GB/s per run; `--checkpoint DIR` times the whole resume verification of a checkpoint
// (verify_checkpoint: checksums, state checks, non-finite scan) instead. The first run of
// a file not in the page cache measures the disk; later runs the hash and the copy out of
// the page cache. Not a ctest test (bench/README.md).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/io/checkpoint_files.h"
#include "runtime/io/file_checksum.h"
#include "runtime/train/checkpoint_verify.h"

int main(int argc, char** argv) {
  int repeat = 3;
  std::vector<std::string> files, checkpoints;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (a == "--checkpoint" && i + 1 < argc) {
      checkpoints.push_back(argv[++i]);
    } else {
      files.push_back(a);
    }
  }
  if ((files.empty() && checkpoints.empty()) || repeat < 1) {
    std::fprintf(stderr, "usage: olmo2_checksum_bench [--repeat N] [--checkpoint DIR]... FILE...\n");
    return 2;
  }
  try {
    for (const std::string& dir : checkpoints) {
      uint64_t bytes = 0;
      for (const olmo2::ListedFile& f : olmo2::read_file_listing(dir).files) bytes += f.bytes;
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        olmo2::verify_checkpoint(dir, {}, nullptr);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%s run %d: verify_checkpoint of %llu listed bytes in %.3f s = %.2f GB/s\n", dir.c_str(), r + 1,
                    static_cast<unsigned long long>(bytes), s, static_cast<double>(bytes) / s / 1e9);
      }
    }
    for (const std::string& f : files) {
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const olmo2::FileChecksum c = olmo2::checksum_file(f);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%s run %d: %llu bytes in %.3f s = %.2f GB/s (xxh3_128 %s)\n", f.c_str(), r + 1,
                    static_cast<unsigned long long>(c.bytes), s, static_cast<double>(c.bytes) / s / 1e9,
                    c.xxh3_128.c_str());
      }
    }
  } catch (const olmo2::Error& e) {
    std::fprintf(stderr, "olmo2_checksum_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
