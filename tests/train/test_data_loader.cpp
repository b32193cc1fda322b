// Data loader: exact window contents and labels, the pinned seeded order, layout
// invariance over (dp_size, micro_batch_size), epoch wrap, resume from a saved state,
// and one test per input error (each an InputError whose message names the fault).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/train/data_loader.h"
#include "runtime/io/npy.h"
#include "tests/test_util.h"

namespace olmo2 {
namespace {

using ::testing::HasSubstr;

// Writes `tokens` as a '<u4' .npy file and returns its path.
std::string write_tokens(const test::TempDir& dir, const std::string& name,
                         const std::vector<uint32_t>& tokens) {
  const std::string path = dir.file(name);
  NpyWriter w(path);
  w.append(tokens);
  w.close();
  return path;
}

// Tokens first, first + 1, …, first + n - 1.
std::vector<uint32_t> iota(uint32_t first, size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<uint32_t>(i);
  return v;
}

DataLoaderOptions opts(int64_t seq_len, int64_t global_batch, uint64_t seed = 1234,
                       int64_t vocab = 1 << 20) {
  DataLoaderOptions o;
  o.seq_len = seq_len;
  o.global_batch = global_batch;
  o.seed = seed;
  o.vocab_size = vocab;
  return o;
}

using test::input_error;

// The window indices of the whole current step, gathered over ranks and micro-batches.
std::vector<int64_t> step_windows(const DataLoader& dl, int64_t dp, int64_t mbs) {
  std::vector<int64_t> out;
  const int64_t per_rank = dl.options().global_batch / dp / mbs;
  for (int64_t r = 0; r < dp; ++r) {
    for (int64_t m = 0; m < per_rank; ++m) {
      for (const Sample& s : dl.batch(r, dp, m, mbs)) out.push_back(s.window);
    }
  }
  return out;
}

// ---- windows ------------------------------------------------------------------------

TEST(DataLoader, WindowsAndLabelsAcrossFiles) {
  test::TempDir dir;
  // 10 tokens → 3 windows of 3 (token 9 dropped); 7 tokens → 2 windows (106 dropped);
  // 6 tokens → exactly 2 windows.
  const std::vector<std::string> files = {write_tokens(dir, "a.npy", iota(0, 10)),
                                          write_tokens(dir, "b.npy", iota(100, 7)),
                                          write_tokens(dir, "c.npy", iota(200, 6))};
  DataLoader dl(files, opts(3, 2));
  ASSERT_EQ(dl.num_windows(), 7);
  EXPECT_EQ(dl.steps_per_epoch(), 3);
  const std::vector<std::vector<int32_t>> want = {{0, 1, 2},       {3, 4, 5},       {6, 7, 8},
                                                  {100, 101, 102}, {103, 104, 105}, {200, 201, 202},
                                                  {203, 204, 205}};
  for (int64_t w = 0; w < 7; ++w) {
    const Sample s = dl.window(w);
    EXPECT_EQ(s.window, w);
    EXPECT_EQ(s.input_ids, want[w]) << "window " << w;
    EXPECT_EQ(s.labels, (std::vector<int32_t>{want[w][1], want[w][2], kIgnoreIndex}))
        << "window " << w;
  }
  EXPECT_THROW(dl.window(7), ShapeError);
  EXPECT_THROW(dl.window(-1), ShapeError);
}

TEST(DataLoader, BatchSamplesCarryTheirWindowsTokens) {
  test::TempDir dir;
  DataLoader dl({write_tokens(dir, "a.npy", iota(0, 64))}, opts(8, 4));
  for (int step = 0; step < 2; ++step, dl.advance()) {
    for (const Sample& s : dl.batch(0, 1, 0, 4)) {
      ASSERT_EQ(s.input_ids.size(), 8u);
      for (int i = 0; i < 8; ++i) EXPECT_EQ(s.input_ids[i], s.window * 8 + i);
      EXPECT_EQ(s.labels[6], s.window * 8 + 7);
      EXPECT_EQ(s.labels[7], kIgnoreIndex);
    }
  }
}

TEST(DataLoader, ReadsUint16Files) {
  test::TempDir dir;
  const std::vector<uint16_t> v = {10, 11, 12, 13, 65535, 15};
  std::string bytes = npy_v1_header(NpyDType::U16, v.size());
  bytes.append(reinterpret_cast<const char*>(v.data()), v.size() * 2);
  {
    std::ofstream f(dir.file("u2.npy"), std::ios::binary);
    f << bytes;
  }
  DataLoader dl({dir.file("u2.npy")}, opts(3, 1, 0, 65536));
  EXPECT_EQ(dl.window(1).input_ids, (std::vector<int32_t>{13, 65535, 15}));
}

// ---- order --------------------------------------------------------------------------

TEST(WindowPermutation, PinnedValues) {
  // Computed by an independent implementation of the documented algorithm; a change
  // here changes the data order of every run.
  EXPECT_EQ(window_permutation(10, 42, 0), (std::vector<uint32_t>{0, 3, 5, 7, 9, 8, 2, 1, 4, 6}));
  EXPECT_EQ(window_permutation(10, 42, 1), (std::vector<uint32_t>{6, 5, 1, 4, 7, 3, 2, 9, 8, 0}));
  EXPECT_EQ(window_permutation(10, 43, 0), (std::vector<uint32_t>{2, 5, 1, 3, 9, 7, 6, 8, 0, 4}));
  EXPECT_EQ(window_permutation(16, 0, 0),
            (std::vector<uint32_t>{13, 4, 7, 5, 10, 2, 8, 9, 15, 11, 3, 1, 12, 0, 6, 14}));
  EXPECT_TRUE(window_permutation(0, 1, 0).empty());
  EXPECT_EQ(window_permutation(1, 1, 0), (std::vector<uint32_t>{0}));
}

TEST(WindowPermutation, IsAPermutation) {
  for (uint64_t n : {2u, 3u, 97u, 1000u}) {
    std::vector<uint32_t> p = window_permutation(n, 7, 3);
    std::sort(p.begin(), p.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(p[i], i) << "n " << n;
  }
  EXPECT_THAT(input_error([] { window_permutation(uint64_t{1} << 32, 0, 0); }),
              HasSubstr("4294967296 windows; at most 2^32 - 1"));
}

TEST(DataLoader, StepsOfAnEpochVisitDistinctWindows) {
  test::TempDir dir;
  DataLoader dl({write_tokens(dir, "a.npy", iota(0, 4 * 40))}, opts(4, 8));
  std::set<int64_t> seen;
  for (int s = 0; s < 5; ++s, dl.advance()) {
    for (int64_t w : step_windows(dl, 1, 8))
      EXPECT_TRUE(seen.insert(w).second) << "window " << w << " twice";
  }
  EXPECT_EQ(seen.size(), 40u);
  EXPECT_EQ(dl.epoch(), 1);
}

TEST(DataLoader, GlobalBatchIsTheSameForEveryLayout) {
  test::TempDir dir;
  const std::vector<std::string> files = {write_tokens(dir, "a.npy", iota(0, 5 * 23)),
                                          write_tokens(dir, "b.npy", iota(1000, 5 * 30 + 2))};
  DataLoader dl(files, opts(5, 8));
  for (int step = 0; step < 9; ++step, dl.advance()) {  // crosses into epoch 1
    const std::vector<int64_t> reference = step_windows(dl, 1, 8);
    ASSERT_EQ(reference.size(), 8u);
    for (int64_t dp : {1, 2, 4}) {
      for (int64_t mbs : {1, 2}) {
        EXPECT_EQ(step_windows(dl, dp, mbs), reference)
            << "step " << step << " dp " << dp << " mbs " << mbs;
      }
    }
  }
}

TEST(DataLoader, EpochsWrapAndReshuffleDeterministically) {
  test::TempDir dir;
  const std::vector<std::string> files = {write_tokens(dir, "a.npy", iota(0, 2 * 10))};
  auto run = [&](int steps) {
    DataLoader dl(files, opts(2, 3, 99));
    std::vector<std::vector<int64_t>> out;
    for (int s = 0; s < steps; ++s, dl.advance()) {
      out.push_back(step_windows(dl, 1, 3));
      EXPECT_EQ(dl.epoch(), s / 3);
      EXPECT_EQ(dl.step_in_epoch(), s % 3);
    }
    return out;
  };
  const auto a = run(9);  // 10 windows, 3 per step → 3 steps per epoch, 1 window dropped
  const auto b = run(9);
  EXPECT_EQ(a, b);
  const std::vector<std::vector<int64_t>> epoch0(a.begin(), a.begin() + 3),
      epoch1(a.begin() + 3, a.begin() + 6);
  EXPECT_NE(epoch0, epoch1);
  std::set<int64_t> e1;
  for (const auto& step : epoch1) e1.insert(step.begin(), step.end());
  EXPECT_EQ(e1.size(), 9u);
  // Another seed, another order.
  DataLoader other(files, opts(2, 3, 100));
  EXPECT_NE(step_windows(other, 1, 3), a[0]);
}

// ---- state --------------------------------------------------------------------------

TEST(DataLoader, ResumeFromSavedStateRepeatsTheSameBatches) {
  test::TempDir dir;
  const std::vector<std::string> files = {write_tokens(dir, "a.npy", iota(0, 4 * 13)),
                                          write_tokens(dir, "b.npy", iota(500, 4 * 7 + 3))};
  DataLoader dl(files, opts(4, 4, 7));  // 20 windows → 5 steps per epoch
  for (int s = 0; s < 7; ++s) dl.advance();
  const std::string saved = nlohmann::json(dl.state()).dump();
  std::vector<std::vector<Sample>> recorded;
  for (int s = 0; s < 5; ++s, dl.advance()) {  // crosses from epoch 1 into epoch 2
    for (int64_t r = 0; r < 2; ++r) recorded.push_back(dl.batch(r, 2, 0, 2));
  }

  DataLoader fresh(files, opts(4, 4, 7));
  fresh.restore(nlohmann::json::parse(saved).get<DataLoaderState>());
  EXPECT_EQ(fresh.epoch(), 1);
  EXPECT_EQ(fresh.step_in_epoch(), 2);
  size_t k = 0;
  for (int s = 0; s < 5; ++s, fresh.advance()) {
    for (int64_t r = 0; r < 2; ++r, ++k) {
      const std::vector<Sample> got = fresh.batch(r, 2, 0, 2);
      ASSERT_EQ(got.size(), recorded[k].size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].window, recorded[k][i].window) << "step " << s << " rank " << r;
        EXPECT_EQ(got[i].input_ids, recorded[k][i].input_ids);
        EXPECT_EQ(got[i].labels, recorded[k][i].labels);
      }
    }
  }
}

TEST(DataLoader, StateJsonRoundTrip) {
  const DataLoaderState s{3, 2, 18446744073709551615ull, 4096, 512, 123456};
  const nlohmann::json j = s;
  EXPECT_EQ(j.at("seed").get<uint64_t>(), 18446744073709551615ull);
  const DataLoaderState back = j.get<DataLoaderState>();
  EXPECT_EQ(back.epoch, 3);
  EXPECT_EQ(back.step_in_epoch, 2);
  EXPECT_EQ(back.seed, s.seed);
  EXPECT_EQ(back.seq_len, 4096);
  EXPECT_EQ(back.global_batch, 512);
  EXPECT_EQ(back.num_windows, 123456);

  nlohmann::json missing = j;
  missing.erase("step_in_epoch");
  EXPECT_THAT(input_error([&] { missing.get<DataLoaderState>(); }),
              HasSubstr("no field \"step_in_epoch\""));
  nlohmann::json negative = j;
  negative["epoch"] = -1;
  EXPECT_THAT(input_error([&] { negative.get<DataLoaderState>(); }),
              HasSubstr("field \"epoch\" is -1, not a non-negative integer"));
  nlohmann::json text = j;
  text["seed"] = "42";
  EXPECT_THAT(input_error([&] { text.get<DataLoaderState>(); }),
              HasSubstr("field \"seed\" is \"42\""));
}

TEST(DataLoader, RestoreRefusesADifferentDataOrder) {
  test::TempDir dir;
  const std::vector<std::string> files = {write_tokens(dir, "a.npy", iota(0, 4 * 20))};
  DataLoader dl(files, opts(4, 4, 7));
  const DataLoaderState good = dl.state();
  auto refused = [&](DataLoaderState s) { return input_error([&] { dl.restore(s); }); };
  DataLoaderState s = good;
  s.seed = 8;
  EXPECT_THAT(refused(s), HasSubstr("state has seed 8 but this loader has seed 7"));
  s = good;
  s.seq_len = 8;
  EXPECT_THAT(refused(s), HasSubstr("state has seq_len 8 but this loader has seq_len 4"));
  s = good;
  s.global_batch = 2;
  EXPECT_THAT(refused(s), HasSubstr("state has global_batch 2 but this loader has global_batch 4"));
  s = good;
  s.num_windows = 21;
  EXPECT_THAT(refused(s), HasSubstr("state has num_windows 21 but this loader has num_windows 20"));
  s = good;
  s.step_in_epoch = 5;
  EXPECT_THAT(refused(s), HasSubstr("step_in_epoch 5, outside the epoch's steps [0, 5)"));
  s = good;
  s.epoch = -2;
  EXPECT_THAT(refused(s), HasSubstr("negative epoch -2"));
  EXPECT_EQ(dl.epoch(), 0);  // a refused state changes nothing
  EXPECT_EQ(dl.step_in_epoch(), 0);
}

// ---- errors -------------------------------------------------------------------------

TEST(DataLoaderErrors, MissingFile) {
  test::TempDir dir;
  const std::string ok = write_tokens(dir, "a.npy", iota(0, 16));
  const std::string absent = dir.file("absent.npy");
  EXPECT_THAT(input_error([&] {
                DataLoader({ok, absent}, opts(4, 1));
              }),
              HasSubstr("cannot open " + absent));
}

TEST(DataLoaderErrors, WrongDtype) {
  test::TempDir dir;
  std::string bytes = npy_v1_header(NpyDType::U32, 2);
  bytes.replace(bytes.find("<u4"), 3, "<i8");
  bytes.append(16, '\0');
  {
    std::ofstream f(dir.file("i8.npy"), std::ios::binary);
    f << bytes;
  }
  EXPECT_THAT(
      input_error([&] { DataLoader({dir.file("i8.npy")}, opts(1, 1)); }),
      HasSubstr("i8.npy has dtype '<i8'; token files must be uint32 ('<u4') or uint16 ('<u2')"));
}

TEST(DataLoaderErrors, FileShorterThanOneWindow) {
  test::TempDir dir;
  const std::string big = write_tokens(dir, "big.npy", iota(0, 100));
  const std::string small = write_tokens(dir, "small.npy", iota(0, 3));
  EXPECT_THAT(input_error([&] {
                DataLoader({big, small}, opts(4, 1));
              }),
              HasSubstr("file " + small + " has 3 tokens, fewer than one window of seq_len 4"));
}

TEST(DataLoaderErrors, TokenIdNotBelowVocabSize) {
  test::TempDir dir;
  std::vector<uint32_t> tokens = iota(0, 12);
  tokens[9] = 50;
  const std::string a = write_tokens(dir, "a.npy", iota(0, 8));
  const std::string b = write_tokens(dir, "b.npy", tokens);
  DataLoader dl({a, b}, opts(4, 5, 1, 50));  // 5 windows; window 4 is b's tokens 8..11
  EXPECT_THAT(input_error([&] { dl.window(4); }),
              HasSubstr("file " + b + ": token at offset 9 has id 50, not below vocab_size 50"));
  EXPECT_THAT(input_error([&] { dl.batch(0, 1, 0, 5); }), HasSubstr("has id 50"));
  EXPECT_NO_THROW(dl.window(3));
}

TEST(DataLoaderErrors, GlobalBatchLargerThanTheWindows) {
  test::TempDir dir;
  const std::string a = write_tokens(dir, "a.npy", iota(0, 4 * 6 + 3));
  EXPECT_THAT(
      input_error([&] { DataLoader({a}, opts(4, 7)); }),
      HasSubstr("global batch 7 is larger than the 6 windows of seq_len 4 in the 1 token files"));
  EXPECT_NO_THROW(DataLoader({a}, opts(4, 6)));
}

TEST(DataLoaderErrors, BatchSplitNotDivisible) {
  test::TempDir dir;
  DataLoader dl({write_tokens(dir, "a.npy", iota(0, 64))}, opts(4, 8));
  EXPECT_THAT(input_error([&] { dl.batch(0, 3, 0, 1); }),
              HasSubstr("global batch 8 is not divisible by dp_size 3 × micro_batch_size 1 = 3"));
  EXPECT_THAT(input_error([&] { dl.batch(0, 2, 0, 3); }),
              HasSubstr("global batch 8 is not divisible by dp_size 2 × micro_batch_size 3 = 6"));
  EXPECT_THAT(input_error([&] { dl.batch(2, 2, 0, 2); }), HasSubstr("dp_rank 2 is outside [0, 2)"));
  EXPECT_THAT(input_error([&] { dl.batch(0, 2, 2, 2); }),
              HasSubstr("micro_batch_index 2 is outside [0, 2)"));
  EXPECT_THAT(input_error([&] { dl.batch(0, 0, 0, 2); }),
              HasSubstr("dp_size must be positive, got 0"));
}

TEST(DataLoaderErrors, BadOptions) {
  test::TempDir dir;
  const std::string a = write_tokens(dir, "a.npy", iota(0, 64));
  EXPECT_THAT(input_error([&] { DataLoader({}, opts(4, 1)); }), HasSubstr("no token files given"));
  EXPECT_THAT(input_error([&] { DataLoader({a}, opts(0, 1)); }),
              HasSubstr("seq_len must be positive, got 0"));
  EXPECT_THAT(input_error([&] { DataLoader({a}, opts(4, -1)); }),
              HasSubstr("global_batch must be positive, got -1"));
  EXPECT_THAT(input_error([&] { DataLoader({a}, opts(4, 1, 0, 0)); }),
              HasSubstr("vocab_size must be positive"));
  EXPECT_THAT(input_error([&] { DataLoader({a}, opts(4, 1, 0, (int64_t{1} << 31) + 1)); }),
              HasSubstr("vocab_size 2147483649 does not fit int32"));
}

}  // namespace
}  // namespace olmo2
