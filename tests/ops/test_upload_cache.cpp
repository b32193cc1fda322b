// The content-keyed device copies of paged attention's descriptors (ops/upload_cache.h;
// docs/architecture.md §8): the layers of one step pass the same bytes and make one
// upload, a new step's other bytes make one more, an old content comes back from the
// cache while kept, the least recently used is released beyond the capacity, and all
// are released at the end.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "ops/upload_cache.h"

namespace olmo2::ops {
namespace {

struct FakeDevice {
  std::vector<std::vector<unsigned char>*> live;
  int released = 0;
  UploadCache* make(size_t entries) {
    return new UploadCache(
        [this](const void* src, size_t n) -> void* {
          auto* copy = new std::vector<unsigned char>(static_cast<const unsigned char*>(src),
                                                      static_cast<const unsigned char*>(src) + n);
          live.push_back(copy);
          return copy;
        },
        [this](void* p) {
          ++released;
          delete static_cast<std::vector<unsigned char>*>(p);
        },
        entries);
  }
};

std::vector<int32_t> tables(int step) { return {step, 3, 5, 7, step * 2, -1, 11}; }

TEST(UploadCache, OneUploadPerStepNotPerLayer) {
  FakeDevice dev;
  UploadCache* cache = dev.make(2);
  for (int step = 0; step < 3; ++step) {
    const std::vector<int32_t> t = tables(step);
    const void* first = nullptr;
    for (int layer = 0; layer < 16; ++layer) {
      const std::vector<int32_t> again = tables(step);  // rebuilt per layer, as paged attention does
      const void* d = cache->get(again.data(), again.size() * sizeof(int32_t));
      if (layer == 0) first = d;
      EXPECT_EQ(d, first) << "step " << step << " layer " << layer;
      const auto* copy = static_cast<const std::vector<unsigned char>*>(d);
      ASSERT_EQ(copy->size(), t.size() * sizeof(int32_t));
      EXPECT_EQ(std::memcmp(copy->data(), t.data(), copy->size()), 0);
    }
    EXPECT_EQ(cache->uploads(), static_cast<size_t>(step + 1));
  }
  EXPECT_EQ(dev.released, 1) << "three contents, two kept";
  // Step 2's content is kept; step 0's was released and comes back as a new upload.
  const std::vector<int32_t> t2 = tables(2), t0 = tables(0);
  cache->get(t2.data(), t2.size() * sizeof(int32_t));
  EXPECT_EQ(cache->uploads(), 3u);
  cache->get(t0.data(), t0.size() * sizeof(int32_t));
  EXPECT_EQ(cache->uploads(), 4u);
  // Same hash length, one byte different: another upload.
  std::vector<int32_t> t0b = t0;
  t0b.back() ^= 1;
  cache->get(t0b.data(), t0b.size() * sizeof(int32_t));
  EXPECT_EQ(cache->uploads(), 5u);
  delete cache;
  EXPECT_EQ(dev.released, 5) << "every upload released by the end";
}

}  // namespace
}  // namespace olmo2::ops
