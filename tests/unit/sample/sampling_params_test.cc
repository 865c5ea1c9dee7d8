#include "core/sample/sampling_params.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kVocab = 100;

void ExpectInvalid(const SamplingParams& params, const char* field) {
  const absl::Status status = params.Validate(kVocab);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_THAT(status.message(), HasSubstr(field));
}

TEST(SamplingParamsTest, DefaultsAreValid) { EXPECT_TRUE(SamplingParams{}.Validate(kVocab).ok()); }

TEST(SamplingParamsTest, RangesAreChecked) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const float t : {-0.5f, nan, inf}) ExpectInvalid({.temperature = t}, "temperature");
  ExpectInvalid({.top_k = -1}, "top_k");
  for (const float p : {0.0f, 1.5f, nan, -0.1f}) ExpectInvalid({.top_p = p}, "top_p");
  for (const float p : {-0.1f, 1.01f, nan}) ExpectInvalid({.min_p = p}, "min_p");
  for (const float p : {0.0f, -1.0f, nan, inf}) {
    ExpectInvalid({.repetition_penalty = p}, "repetition_penalty");
  }
  ExpectInvalid({.max_tokens = 0}, "max_tokens");
  ExpectInvalid({.stop_token_ids = {3, kVocab}}, "stop token id 100");
  ExpectInvalid({.stop_token_ids = {-1}}, "stop token id -1");
}

TEST(SamplingParamsTest, EdgesOfTheRangesAreValid) {
  EXPECT_TRUE(SamplingParams({.temperature = 0.0f}).Validate(kVocab).ok());
  EXPECT_TRUE(SamplingParams({.top_p = 1.0f, .min_p = 1.0f}).Validate(kVocab).ok());
  EXPECT_TRUE(
      SamplingParams({.max_tokens = 1, .stop_token_ids = {0, kVocab - 1}}).Validate(kVocab).ok());
}

}  // namespace
}  // namespace pulse
