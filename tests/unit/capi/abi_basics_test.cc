// Library-wide calls: versions, features, status names, the thread-local last error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <thread>

#include "pulseinfer/pulseinfer.h"

namespace {

TEST(AbiBasics, VersionsMatchTheHeader) {
  EXPECT_EQ(pulse_abi_version(), PULSE_ABI_VERSION);
  const std::string version = pulse_version();
  EXPECT_EQ(std::count(version.begin(), version.end(), '.'), 2) << version;
  EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(version.front()))) << version;
}

TEST(AbiBasics, FeaturesHaveTheCpuBackend) {
  const uint64_t features = pulse_features();
  EXPECT_NE(features & PULSE_FEATURE_CPU, 0u);
  if ((features & PULSE_FEATURE_CUDA_DEVICE) != 0) {
    EXPECT_NE(features & PULSE_FEATURE_CUDA_COMPILED, 0u);
  }
}

TEST(AbiBasics, EveryStatusHasADistinctName) {
  const pulse_status codes[] = {PULSE_OK,
                                PULSE_NO_CAPACITY,
                                PULSE_CANCELLED,
                                PULSE_AGAIN,
                                PULSE_INVALID_ARGUMENT,
                                PULSE_NOT_FOUND,
                                PULSE_IO,
                                PULSE_INVALID_MODEL,
                                PULSE_UNSUPPORTED,
                                PULSE_OUT_OF_MEMORY,
                                PULSE_FAILED_PRECONDITION,
                                PULSE_INTERNAL};
  std::set<std::string> names;
  for (const pulse_status code : codes) {
    ASSERT_NE(pulse_status_string(code), nullptr);
    names.insert(pulse_status_string(code));
  }
  EXPECT_EQ(names.size(), std::size(codes));
  EXPECT_STREQ(pulse_status_string(12345), "unknown status");
  EXPECT_STREQ(pulse_status_string(PULSE_INVALID_ARGUMENT), "invalid argument");
}

TEST(AbiBasics, EveryFinishReasonHasAName) {
  EXPECT_STREQ(pulse_finish_reason_string(PULSE_FINISH_MAX_TOKENS), "max_tokens");
  EXPECT_STREQ(pulse_finish_reason_string(PULSE_FINISH_STOP_TOKEN), "stop_token");
  EXPECT_STREQ(pulse_finish_reason_string(PULSE_FINISH_CANCELLED), "cancelled");
  EXPECT_STREQ(pulse_finish_reason_string(-3), "unknown");
}

TEST(AbiBasics, LastErrorIsNeverNullAndNamesTheFailure) {
  ASSERT_NE(pulse_last_error(), nullptr);
  EXPECT_EQ(pulse_engine_run(nullptr), PULSE_INVALID_ARGUMENT);
  EXPECT_STREQ(pulse_last_error(), "pulse_engine_run: engine is NULL");
}

TEST(AbiBasics, LastErrorIsThreadLocal) {
  EXPECT_EQ(pulse_engine_run(nullptr), PULSE_INVALID_ARGUMENT);
  std::string fresh_thread_error;
  std::string other_thread_error;
  std::thread other([&] {
    fresh_thread_error = pulse_last_error();
    EXPECT_EQ(pulse_request_cancel(nullptr, 1), PULSE_INVALID_ARGUMENT);
    other_thread_error = pulse_last_error();
  });
  other.join();
  EXPECT_EQ(fresh_thread_error, "");
  EXPECT_EQ(other_thread_error, "pulse_request_cancel: engine is NULL");
  EXPECT_STREQ(pulse_last_error(), "pulse_engine_run: engine is NULL");
}

TEST(AbiBasics, SuccessLeavesTheLastErrorAlone) {
  EXPECT_EQ(pulse_engine_run(nullptr), PULSE_INVALID_ARGUMENT);
  pulse_engine_params params;
  EXPECT_EQ(pulse_engine_params_init(&params, sizeof(params)), PULSE_OK);
  EXPECT_STREQ(pulse_last_error(), "pulse_engine_run: engine is NULL");
}

TEST(AbiBasics, FreeAndRetainAcceptNull) {
  pulse_model_free(nullptr);
  pulse_engine_free(nullptr);
  EXPECT_EQ(pulse_model_retain(nullptr), nullptr);
}

}  // namespace
