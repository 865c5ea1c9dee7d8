#include "core/kv/kv_cache.h"

#include <memory>

#include "core/backend/cpu/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

std::shared_ptr<Backend> CpuBackend(size_t memory_limit = 0) {
  CpuBackendOptions options;
  options.threads = 1;
  options.memory_limit_bytes = memory_limit;
  return *CreateCpuBackend(options);
}

constexpr PagedKvLayout kLayout{.block_tokens = 4, .num_kv_heads = 2, .head_dim = 8};

TEST(KvCacheTest, AllocatesOneBufferPerLayer) {
  std::shared_ptr<Backend> backend = CpuBackend();
  absl::StatusOr<KvCache> cache = KvCache::Create(*backend, kLayout, 3, 5);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->num_layers(), 3);
  EXPECT_EQ(cache->num_blocks(), 5);
  EXPECT_EQ(cache->layer_bytes(), 5u * 2 * 2 * 4 * 8 * sizeof(float));
  EXPECT_NE(cache->layer(0), cache->layer(1));
  // The whole buffer is writable.
  static_cast<float*>(cache->layer(2))[cache->layer_bytes() / sizeof(float) - 1] = 1.0f;
}

TEST(KvCacheTest, TooLargeForTheBackendIsResourceExhausted) {
  std::shared_ptr<Backend> backend = CpuBackend(/*memory_limit=*/4096);
  const absl::StatusOr<KvCache> cache = KvCache::Create(*backend, kLayout, 2, 100);
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(cache.status().message(), ::testing::HasSubstr("KV cache"));
}

TEST(KvCacheTest, AbsurdSizesAreRejected) {
  std::shared_ptr<Backend> backend = CpuBackend();
  const PagedKvLayout huge{.block_tokens = 1 << 30, .num_kv_heads = 1 << 30, .head_dim = 1 << 30};
  EXPECT_EQ(KvCache::Create(*backend, huge, 1, 1 << 30).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(KvCache::Create(*backend, kLayout, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KvCache::Create(*backend, kLayout, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pulse
