// A request whose forward pass produces NaN logits fails alone; the others are unaffected.
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/sched/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::Greedy;
using ::pulse::testing::LoadModel;
using ::pulse::testing::MakeEngine;
using ::pulse::testing::RunToIdle;
using ::pulse::testing::SnapshotOf;
using ::pulse::testing::TinyConfig;
using ::testing::HasSubstr;

constexpr int32_t kPoisonedToken = 13;

// A random source whose embedding row kPoisonedToken is NaN.
class PoisonedSource final : public TensorSource {
 public:
  PoisonedSource() : inner_(*OpenRandomSource(TinyConfig(), 7)) {}

  std::string_view format() const override { return inner_->format(); }
  const ModelConfig& config() const override { return inner_->config(); }
  std::span<const TensorInfo> tensors() const override { return inner_->tensors(); }
  const std::map<std::string, std::string>& metadata() const override { return inner_->metadata(); }
  absl::Status Read(std::string_view name, std::span<float> out) const override {
    PULSE_RETURN_IF_ERROR(inner_->Read(name, out));
    if (name == "model.embed_tokens.weight") {
      const size_t hidden = static_cast<size_t>(config().hidden_size);
      std::fill_n(out.begin() + kPoisonedToken * hidden, hidden,
                  std::numeric_limits<float>::quiet_NaN());
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<TensorSource> inner_;
};

TEST(EngineFailureTest, NanLogitsFailOnlyThatRequest) {
  std::shared_ptr<const Model> model = LoadModel(PoisonedSource());
  const std::vector<int32_t> healthy_prompt = {1, 2, 3, 4};
  std::vector<int32_t> alone;
  {
    std::unique_ptr<Engine> engine = MakeEngine(model);
    const RequestId id = *engine->Submit(healthy_prompt, Greedy(8), nullptr);
    RunToIdle(*engine);
    alone = SnapshotOf(*engine, id).tokens;
  }
  // The poisoned request may still have sampled healthy tokens unless its prompt has the token:
  // the NaN reaches its logits at the first sample.
  std::unique_ptr<Engine> engine = MakeEngine(model);
  std::vector<TokenEvent> events;
  const auto sink = [&events](const TokenEvent& event) {
    events.push_back(event);
    return true;
  };
  const RequestId healthy = *engine->Submit(healthy_prompt, Greedy(8), nullptr);
  const RequestId poisoned = *engine->Submit({5, kPoisonedToken, 6}, Greedy(8), sink);
  RunToIdle(*engine);

  const RequestSnapshot failed = SnapshotOf(*engine, poisoned);
  EXPECT_EQ(failed.state, RequestState::kFinished);
  EXPECT_EQ(failed.reason, FinishReason::kError);
  EXPECT_EQ(failed.error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(failed.error.message(), HasSubstr("nan"));
  EXPECT_THAT(failed.error.message(), ::testing::Not(HasSubstr("EngineOptions")));
  EXPECT_TRUE(failed.tokens.empty());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].token, -1);
  EXPECT_TRUE(events[0].finished);
  EXPECT_EQ(events[0].reason, FinishReason::kError);
  EXPECT_TRUE(events[0].logits.empty());

  EXPECT_EQ(SnapshotOf(*engine, healthy).tokens, alone);
  EXPECT_EQ(engine->stats().kv_blocks_in_use, 0);
}

}  // namespace
}  // namespace pulse
