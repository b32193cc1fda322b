// base64_encode / base64_decode (runtime/trace/base64.cpp) against RFC 4648 §10's test
// vectors, a float round trip, and the text it refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "runtime/trace/trace_spec.h"
#include "tests/test_util.h"

namespace olmo2::trace {
namespace {

using ::testing::HasSubstr;

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Base64, MatchesRfc4648TestVectors) {
  const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    EXPECT_EQ(base64_encode(bytes_of(plain)), coded) << plain;
    const std::vector<uint8_t> back = base64_decode(coded, "v");
    EXPECT_EQ(std::string(back.begin(), back.end()), plain) << coded;
  }
}

TEST(Base64, RoundTripsFloatsBitExactly) {
  const std::vector<float> floats = {1.0f, -0.0f, 3.14159274f, 1e-45f, -3.4028235e38f, 0.1f, 7.0f};
  std::vector<uint8_t> raw(floats.size() * 4);
  std::memcpy(raw.data(), floats.data(), raw.size());
  const std::string text = base64_encode(raw);
  EXPECT_EQ(text.size(), 40u);  // 28 bytes: 10 groups of 4 characters
  const std::vector<uint8_t> back = base64_decode(text, "v");
  ASSERT_EQ(back.size(), raw.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    float f;
    std::memcpy(&f, back.data() + 4 * i, 4);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(floats[i])) << i;
  }
}

TEST(Base64, RefusesTextThatIsNotBase64NamingTheField) {
  const auto error = [](const std::string& text) {
    return test::input_error([&] { base64_decode(text, "interventions[1].vector"); });
  };
  EXPECT_THAT(error("Zm9"), HasSubstr("interventions[1].vector is not base64: its length 3"));
  EXPECT_THAT(error("Zm 9"), HasSubstr("interventions[1].vector is not base64: character 2 is byte 32"));
  EXPECT_THAT(error("Zm9v\nZm9v"), HasSubstr("is not base64"));
  EXPECT_THAT(error("Zm9v\r\n\r\n"), HasSubstr("character 4 is byte 13"));
  EXPECT_THAT(error("Zg=a"), HasSubstr("character 2 is '='"));
  EXPECT_THAT(error("Z==="), HasSubstr("character 1 is '='"));
  EXPECT_THAT(error("Zm-_"), HasSubstr("character 2 is '-'"));  // the URL-safe alphabet is not accepted
}

}  // namespace
}  // namespace olmo2::trace
