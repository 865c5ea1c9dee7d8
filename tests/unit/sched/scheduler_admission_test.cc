// Scheduler::Admit with given rates: which queued requests run offloaded, wait for recall, or run
// with a budget lowered to keep up (EngineOptions::min_budget_tokens).
#include <memory>
#include <vector>

#include "core/offload/residency.h"
#include "core/sched/request.h"
#include "core/sched/scheduler.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

constexpr int32_t kBlockTokens = 4;
constexpr int32_t kBudget = 160;

// A request the engine places, with a 400-token prompt and 60 tokens to generate.
std::shared_ptr<Request> EnginePlaced(RequestId id) {
  SamplingParams params;
  params.max_tokens = 60;
  auto request = std::make_shared<Request>(id, std::vector<int32_t>(400, 3), params, nullptr,
                                           /*max_context=*/1024, nullptr, Clock::now());
  const SelectionOptions selection{
      .budget_tokens = kBudget, .sink_tokens = kBlockTokens, .window_tokens = 2 * kBlockTokens};
  request->offload = selection;
  request->placed_by_engine = true;
  request->engine_selection = selection;
  return request;
}

// A dense pool that holds no prompt (each is prefilled staged) but every resident set, and a step
// of 8.5 ms of compute in which each offloaded row recalls 1 MB at 1 GB/s: eight rows keep up, a
// ninth at the full budget does not.
Scheduler MakeScheduler(int32_t min_budget_tokens) {
  Scheduler scheduler({.max_batch = 16,
                       .prefill_chunk = 16,
                       .max_step_tokens = 64,
                       .block_tokens = kBlockTokens,
                       .block_bytes = 1024,
                       .host_blocks = 16 * 120,
                       .slot_blocks = 16 * 50,
                       .admission = AdmissionKind::kIoAdaptive,
                       .min_budget_tokens = min_budget_tokens},
                      /*num_blocks=*/60, /*pin_host_blocks=*/nullptr);
  scheduler.costs().Record(
      {.seconds = 0.0105, .offloaded_rows = 2, .recall_bytes = 2'000'000, .recall_seconds = 0.002});
  return scheduler;
}

TEST(SchedulerAdmissionTest, ARequestThatWouldOutrunTheLinkWaits) {
  Scheduler scheduler = MakeScheduler(/*min_budget_tokens=*/0);
  for (RequestId id = 1; id <= 10; ++id) scheduler.Enqueue(EnginePlaced(id));
  const Scheduler::Admitted admitted = scheduler.Admit();
  ASSERT_EQ(admitted.running.size(), 8u);
  for (const std::shared_ptr<Request>& request : admitted.running) {
    ASSERT_TRUE(request->offloaded_blocks.has_value());
    EXPECT_EQ(request->offload->budget_tokens, kBudget);
  }
  EXPECT_EQ(scheduler.queued(), 2);
  const EngineStats::Admission stats = scheduler.admission_stats();
  EXPECT_EQ(stats.offloaded, 8);
  EXPECT_EQ(stats.io_waits, 1);
  EXPECT_EQ(stats.lowered_budgets, 0);
}

// With a least budget, the ninth runs at half the budget (0.5 ms more: 8.5 ms), and the tenth,
// which not even the least budget lets keep up, waits with the engine's budget.
TEST(SchedulerAdmissionTest, ALeastBudgetAdmitsWithTheLargestHalvingThatKeepsUp) {
  Scheduler scheduler = MakeScheduler(/*min_budget_tokens=*/16);
  std::vector<std::shared_ptr<Request>> requests;
  for (RequestId id = 1; id <= 10; ++id) {
    requests.push_back(EnginePlaced(id));
    scheduler.Enqueue(requests.back());
  }
  const Scheduler::Admitted admitted = scheduler.Admit();
  ASSERT_EQ(admitted.running.size(), 9u);
  EXPECT_EQ(requests[7]->offload->budget_tokens, kBudget);
  EXPECT_EQ(requests[8]->offload->budget_tokens, kBudget / 2);
  EXPECT_EQ(requests[8]->slot_blocks,
            SlotsNeeded(*requests[8]->offload, kBlockTokens, requests[8]->max_kv_tokens()));
  EXPECT_LT(requests[8]->slot_blocks, requests[7]->slot_blocks);
  EXPECT_EQ(requests[9]->offload->budget_tokens, kBudget);
  EXPECT_FALSE(requests[9]->offloaded_blocks.has_value());
  const EngineStats::Admission stats = scheduler.admission_stats();
  EXPECT_EQ(stats.offloaded, 9);
  EXPECT_EQ(stats.lowered_budgets, 1);
  EXPECT_EQ(stats.io_waits, 1);
}

}  // namespace
}  // namespace pulse
