// ops::top_candidates on the CPU (ops/top_candidates.h) against a brute-force reference:
// a stable sort of each row's real columns by value, descending (so equal values keep
// the lower column first), and the fp64 Σexp in column order. Ties (−0 and +0 among
// them), k above the real columns, padding columns that would win if read, padded rows,
// rows without real columns, and the shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ops/top_candidates.h"

namespace olmo2::ops {
namespace {

const float kNinf = -std::numeric_limits<float>::infinity();

struct Result {
  std::vector<float> values;
  std::vector<int32_t> columns;
  std::vector<float> stats;
};

/// The contract of ops/top_candidates.h written the plain way.
Result reference(const std::vector<float>& x, int64_t rows, int64_t stride, int64_t real, int64_t k) {
  Result r;
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x.data() + i * stride;
    std::vector<int32_t> order(static_cast<size_t>(real));
    std::iota(order.begin(), order.end(), 0);
    // NaN below every number (the contract), else the higher value; stable: the lower column.
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      if (std::isnan(row[a]) != std::isnan(row[b])) return std::isnan(row[b]);
      return row[a] > row[b];
    });
    for (int64_t j = 0; j < k; ++j) {
      r.values.push_back(j < real ? row[order[static_cast<size_t>(j)]] : kNinf);
      r.columns.push_back(j < real ? order[static_cast<size_t>(j)] : -1);
    }
    if (real == 0) {
      r.stats.insert(r.stats.end(), {kNinf, 0.0f});
      continue;
    }
    const float mx = row[order[0]];
    double s = 0;
    for (int64_t j = 0; j < real; ++j) s += std::exp(static_cast<double>(row[j]) - mx);
    r.stats.insert(r.stats.end(), {mx, static_cast<float>(s)});
  }
  return r;
}

Result run(std::vector<float>& x, int64_t rows, int64_t cols, int64_t stride, int64_t real, int64_t k) {
  Result r;
  r.values.assign(static_cast<size_t>(rows * k), 123.0f);  // overwritten everywhere
  r.columns.assign(static_cast<size_t>(rows * k), 77);
  r.stats.assign(static_cast<size_t>(rows * 2), 123.0f);
  const TensorView logits(x.data(), DType::F32, {rows, cols}, {stride, 1}, Device::CPU);
  top_candidates(logits, real, k > 0 ? TensorView(r.values.data(), DType::F32, {rows, k}) : TensorView(),
                 k > 0 ? TensorView(r.columns.data(), DType::I32, {rows, k}) : TensorView(),
                 TensorView(r.stats.data(), DType::F32, {rows, 2}));
  return r;
}

/// Bit equality (so −0 and +0 differ, and NaN fails).
void expect_bits(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &want[i], 4), std::memcpy(&b, &got[i], 4);
    EXPECT_EQ(a, b) << what << " element " << i << ": want " << want[i] << " got " << got[i];
  }
}

/// rows × stride logits: values from `levels` distinct numbers (many ties) or N(0, 3);
/// the columns past `real` hold +∞-like values that would win if read.
std::vector<float> make_logits(std::mt19937& rng, int64_t rows, int64_t stride, int64_t real, int levels) {
  std::vector<float> x(static_cast<size_t>(rows * stride), 1e30f);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> level(-levels / 2, levels / 2);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < real; ++j) {
      float v = levels > 0 ? static_cast<float>(level(rng)) : normal(rng);
      if (v == 0.0f && (j & 1)) v = -0.0f;  // −0 and +0 mixed: equal, so ordered by column
      x[static_cast<size_t>(i * stride + j)] = v;
    }
  }
  return x;
}

TEST(TopCandidates, EqualsAStableSortReferenceWithTiesPaddingAndEveryK) {
  std::mt19937 rng(5);
  for (const int levels : {0, 3, 9}) {
    for (const int64_t real : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{300}}) {
      const int64_t cols = real + 5, stride = cols + 3, rows = 4;
      for (const int64_t k : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{5}, int64_t{75}, real, real + 4}) {
        std::vector<float> x = make_logits(rng, rows, stride, real, levels);
        const Result want = reference(x, rows, stride, real, k);
        const Result got = run(x, rows, cols, stride, real, k);
        SCOPED_TRACE(testing::Message() << "levels " << levels << " real " << real << " k " << k);
        expect_bits(want.values, got.values, "values");
        EXPECT_EQ(want.columns, got.columns);
        expect_bits(want.stats, got.stats, "stats");
      }
    }
  }
}

TEST(TopCandidates, GreedyIsTheFirstOfEqualMaxima) {
  std::vector<float> x = {1.0f, 4.0f, -2.0f, 4.0f, 4.0f, 9.0f};  // column 5 is padding
  const Result got = run(x, 1, 6, 6, 5, 1);
  EXPECT_EQ(got.columns, std::vector<int32_t>{1});
  EXPECT_EQ(got.values, std::vector<float>{4.0f});
  std::vector<float> zeros = {-0.0f, 0.0f, -1.0f};
  const Result z = run(zeros, 1, 3, 3, 3, 2);
  EXPECT_EQ(z.columns, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(std::signbit(z.values[0]));  // the logit's own bits
  EXPECT_TRUE(std::signbit(z.stats[0]));
}

// NaN ranks below every number, −∞ included (the CUDA kernel orders it so too): never
// chosen while a number is left, whatever its column; a row of NaN only gives column 0.
TEST(TopCandidates, NaNRanksBelowEveryNumber) {
  const float nan = std::nanf("");
  std::vector<float> x = {nan, -INFINITY, 2.0f, nan, 2.0f};
  const Result one = run(x, 1, 5, 5, 5, 1);
  EXPECT_EQ(one.columns, std::vector<int32_t>{2});
  const Result all = run(x, 1, 5, 5, 5, 5);
  EXPECT_EQ(all.columns, (std::vector<int32_t>{2, 4, 1, 0, 3}));
  std::vector<float> nans = {nan, nan};
  EXPECT_EQ(run(nans, 1, 2, 2, 2, 1).columns, std::vector<int32_t>{0});
}

TEST(TopCandidates, NothingToDoAndShapeErrors) {
  std::vector<float> x(12, 1.0f);
  const TensorView logits(x.data(), DType::F32, {3, 4});
  top_candidates(TensorView(x.data(), DType::F32, {0, 4}), 4, TensorView(), TensorView(), TensorView());
  std::vector<float> v(6);
  std::vector<int32_t> c(6);
  std::vector<float> s(6);
  const TensorView values(v.data(), DType::F32, {3, 2}), columns(c.data(), DType::I32, {3, 2});
  EXPECT_THROW(top_candidates(logits, 5, values, columns, TensorView()), ShapeError);   // real > V
  EXPECT_THROW(top_candidates(logits, -1, values, columns, TensorView()), ShapeError);  // real < 0
  EXPECT_THROW(top_candidates(logits, 4, values, TensorView(), TensorView()), ShapeError);
  EXPECT_THROW(top_candidates(logits, 4, values, TensorView(c.data(), DType::F32, {3, 2}), TensorView()), ShapeError);
  EXPECT_THROW(top_candidates(logits, 4, TensorView(v.data(), DType::F32, {2, 3}), TensorView(c.data(), DType::I32, {2, 3}),
                              TensorView()),
               ShapeError);
  EXPECT_THROW(top_candidates(logits, 4, values, columns, TensorView(s.data(), DType::F32, {3, 1})), ShapeError);
  EXPECT_THROW(top_candidates(TensorView(x.data(), DType::F32, {12}), 4, values, columns, TensorView()), ShapeError);
  EXPECT_THROW(top_candidates(TensorView(x.data(), DType::F32, {3, 2}, {4, 2}, Device::CPU), 2, values, columns,
                              TensorView()),
               ShapeError);  // columns not contiguous
}

}  // namespace
}  // namespace olmo2::ops
