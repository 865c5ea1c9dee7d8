// Prefix caching of the host tier (OffloadConfig::prefix_cache) on the CPU backend: requests over
// one document share its cached blocks, skip their prefill and generate the tokens of unshared
// runs; under random submits, cancels and steps every token stays that of an unshared run and
// every block's holders return to zero; a host tier too small for every request at once evicts
// unreferenced cached blocks and corrupts nothing.
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "core/sched/engine.h"
#include "gtest/gtest.h"
#include "tests/unit/sched/tiny_model.h"

namespace pulse {
namespace {

using ::pulse::testing::MakeEngine;
using ::pulse::testing::Prompt;
using ::pulse::testing::RunToIdle;
using ::pulse::testing::SnapshotOf;
using ::pulse::testing::TinyConfig;
using ::pulse::testing::TinyModel;

constexpr int32_t kBlockTokens = 4;

SamplingParams Greedy(int32_t max_tokens) { return testing::Greedy(max_tokens, true); }

// Every request offloaded, a budget below the contexts (selection matters), the prefix cache
// `cached`, a host tier of `host_tokens`.
EngineOptions Options(bool cached, int64_t host_tokens = 4 * 200) {
  return {.max_batch = 4,
          .prefill_chunk = 16,
          .max_step_tokens = 64,
          .block_tokens = kBlockTokens,
          .kv_capacity_tokens = 128,
          .offload = OffloadConfig{.selection = {.mode = SelectionMode::kSoloHead,
                                                 .budget_tokens = 24,
                                                 .sink_tokens = kBlockTokens,
                                                 .window_tokens = 2 * kBlockTokens},
                                   .host_tokens = host_tokens,
                                   .slot_tokens = 4 * 64,
                                   .prefix_cache = cached},
          .admission = AdmissionKind::kOffloadEvery};
}

// A document and a question of its own for each of `count` requests.
std::vector<std::vector<int32_t>> OverOneDocument(const std::vector<int32_t>& document,
                                                  int32_t count, uint32_t seed) {
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < count; ++i) {
    std::vector<int32_t> prompt = document;
    const std::vector<int32_t> question = Prompt(5 + i, TinyConfig().vocab_size, seed + i);
    prompt.insert(prompt.end(), question.begin(), question.end());
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

std::vector<int32_t> TokensOf(Engine& engine, RequestId id) {
  const RequestSnapshot snapshot = SnapshotOf(engine, id);
  EXPECT_TRUE(snapshot.error.ok()) << snapshot.error;
  return snapshot.tokens;
}

// Each prompt alone in an engine of `options` without the cache: the tokens sharing must give.
std::vector<int32_t> Unshared(std::shared_ptr<const Model> model,
                              const std::vector<int32_t>& prompt, int32_t max_tokens,
                              EngineOptions options = Options(false)) {
  options.offload->prefix_cache = false;
  std::unique_ptr<Engine> engine = MakeEngine(std::move(model), options);
  const absl::StatusOr<RequestId> id = engine->Submit(prompt, Greedy(max_tokens), nullptr);
  EXPECT_TRUE(id.ok()) << id.status();
  RunToIdle(*engine);
  return TokensOf(*engine, id.value_or(0));
}

TEST(EnginePrefixCacheTest, RequestsOverOneDocumentShareItAndGiveTheUnsharedTokens) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> document = Prompt(48, TinyConfig().vocab_size, 3);  // 12 blocks
  const auto prompts = OverOneDocument(document, 4, 40);
  std::unique_ptr<Engine> engine = MakeEngine(model, Options(true));
  // The first runs until it decodes (its prompt is cached then); the others join while it runs,
  // and a last one comes after all have finished.
  std::vector<RequestId> ids = {*engine->Submit(prompts[0], Greedy(30), nullptr)};
  while (engine->stats().generated_tokens < 3) ASSERT_TRUE(engine->Step().ok());
  for (size_t i = 1; i < 3; ++i) ids.push_back(*engine->Submit(prompts[i], Greedy(30), nullptr));
  RunToIdle(*engine);
  ids.push_back(*engine->Submit(prompts[3], Greedy(30), nullptr));
  RunToIdle(*engine);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(TokensOf(*engine, ids[i]), Unshared(model, prompts[i], 30)) << "request " << i;
  }
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.admission.prefix_hits, 3);
  EXPECT_EQ(stats.admission.prefix_hit_tokens, 3 * 48);
  EXPECT_EQ(stats.prefill_tokens, static_cast<int64_t>(prompts[0].size() + prompts[1].size() +
                                                       prompts[2].size() + prompts[3].size()) -
                                      3 * 48);
  // The two that joined together prefilled their questions in one staged step, recalling the
  // document's 12 blocks once a layer; the last recalled them again (128 bytes a token and layer).
  EXPECT_EQ(stats.offload.staged.recall_bytes, 2 * 12 * TinyConfig().num_layers * 4 * 128);
  // Nothing is held; the four prompts' full blocks stay cached (the document's once).
  EXPECT_EQ(stats.host_blocks_in_use, 0);
  int32_t cached = 12;
  for (const auto& prompt : prompts) cached += static_cast<int32_t>(prompt.size()) / 4 - 12;
  EXPECT_EQ(stats.host_blocks_cached, cached);
}

// Under adaptive admission a prompt that fits the KV cache runs resident: once it decodes, its
// full blocks are copied to the host tier and cached, and a later prompt over the same document
// runs offloaded sharing them. A covering budget makes offloaded attention the dense one, so the
// tokens are those of the engine without the cache, where both run resident.
TEST(EnginePrefixCacheTest, AResidentPromptIsCopiedToTheHostTierForTheNextToShare) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<int32_t> document = Prompt(48, TinyConfig().vocab_size, 21);
  const auto prompts = OverOneDocument(document, 2, 22);
  std::vector<std::vector<int32_t>> tokens[2];
  EngineStats stats[2];
  for (const bool cached : {false, true}) {
    EngineOptions options = Options(cached);
    options.admission = AdmissionKind::kIoAdaptive;
    options.offload->selection.budget_tokens = 1 << 20;
    std::unique_ptr<Engine> engine = MakeEngine(model, options);
    for (const auto& prompt : prompts) {
      const RequestId id = *engine->Submit(prompt, Greedy(20), nullptr);
      RunToIdle(*engine);
      tokens[cached].push_back(TokensOf(*engine, id));
    }
    stats[cached] = engine->stats();
  }
  EXPECT_EQ(tokens[1], tokens[0]);
  EXPECT_EQ(stats[0].admission.resident, 2);
  EXPECT_EQ(stats[1].admission.resident, 1);
  EXPECT_EQ(stats[1].admission.offloaded, 1);
  EXPECT_EQ(stats[1].admission.prefix_hits, 1);
  EXPECT_EQ(stats[1].admission.prefix_hit_tokens, 48);
  // The first prompt's 13 full blocks were written to the host tier for the cache.
  EXPECT_GE(stats[1].offload.writeback_blocks, 13 * TinyConfig().num_layers);
}

TEST(EnginePrefixCacheTest, RandomSubmitsCancelsAndStepsKeepEveryTokenAndReleaseEveryBlock) {
  std::shared_ptr<const Model> model = TinyModel();
  const std::vector<std::vector<int32_t>> documents = {Prompt(40, TinyConfig().vocab_size, 5),
                                                       Prompt(28, TinyConfig().vocab_size, 6)};
  // prompt -> its tokens, with every request offloaded at a selecting budget (seeds 1 to 4), or
  // placed by adaptive admission at a covering one (5 and 6), where resident prompts are copied
  // to the host tier for the cache.
  std::map<std::vector<int32_t>, std::vector<int32_t>> unshared[2];
  int64_t hits = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    const bool adaptive = seed > 4;
    EngineOptions options = Options(true);
    if (adaptive) {
      options.admission = AdmissionKind::kIoAdaptive;
      options.offload->selection.budget_tokens = 1 << 20;
    }
    std::unique_ptr<Engine> engine = MakeEngine(model, options);
    std::vector<std::pair<RequestId, std::vector<int32_t>>> submitted;
    std::vector<RequestId> cancelled;
    for (int event = 0; event < 60; ++event) {
      const uint32_t what = rng() % 6;
      if (what == 0 && submitted.size() < 14) {
        // A document's first blocks (all, or cut short) and a question.
        const std::vector<int32_t>& document = documents[rng() % documents.size()];
        std::vector<int32_t> prompt(document.begin(),
                                    document.end() - static_cast<ptrdiff_t>(rng() % 3 * 4));
        const std::vector<int32_t> question =
            Prompt(3 + static_cast<int32_t>(rng() % 6), TinyConfig().vocab_size, rng());
        prompt.insert(prompt.end(), question.begin(), question.end());
        const absl::StatusOr<RequestId> id = engine->Submit(prompt, Greedy(12), nullptr);
        ASSERT_TRUE(id.ok()) << id.status();
        submitted.emplace_back(*id, prompt);
      } else if (what == 1 && !submitted.empty()) {
        const RequestId id = submitted[rng() % submitted.size()].first;
        if (engine->Cancel(id).ok()) cancelled.push_back(id);
      } else {
        ASSERT_TRUE(engine->Step().ok());
      }
    }
    RunToIdle(*engine);
    for (const auto& [id, prompt] : submitted) {
      const RequestSnapshot snapshot = SnapshotOf(*engine, id);
      ASSERT_TRUE(snapshot.error.ok()) << snapshot.error;
      if (std::find(cancelled.begin(), cancelled.end(), id) != cancelled.end()) continue;
      auto& want = unshared[adaptive ? 1 : 0];
      if (!want.contains(prompt)) want[prompt] = Unshared(model, prompt, 12, options);
      EXPECT_EQ(snapshot.tokens, want[prompt]) << "seed " << seed << ", request " << id;
    }
    const EngineStats stats = engine->stats();
    EXPECT_EQ(stats.host_blocks_in_use, 0) << "seed " << seed;
    EXPECT_EQ(stats.kv_blocks_in_use, 0) << "seed " << seed;
    EXPECT_EQ(stats.slot_blocks_in_use, 0) << "seed " << seed;
    EXPECT_LE(stats.host_blocks_cached, stats.host_blocks);
    hits += stats.admission.prefix_hits;
    if (adaptive) {
      EXPECT_GT(stats.admission.resident, 0) << "seed " << seed;
    }
  }
  EXPECT_GT(hits, 0);
}

// Also the test that a host block losing its last holder loses its device slots before it
// serves another request: without that, the requests that reuse the evicted blocks' ids hit
// slots holding the former content, and their tokens change.
TEST(EnginePrefixCacheTest, AFullHostTierEvictsUnreferencedCachedBlocksAndCorruptsNothing) {
  std::shared_ptr<const Model> model = TinyModel();
  // Room for about two requests' worst cases at once (each needs up to 16 + 10 blocks).
  const int64_t host_tokens = 4 * 56;
  const std::vector<int32_t> first_document = Prompt(40, TinyConfig().vocab_size, 8);
  const std::vector<int32_t> second_document = Prompt(40, TinyConfig().vocab_size, 9);
  std::unique_ptr<Engine> engine = MakeEngine(model, Options(true, host_tokens));
  std::vector<std::pair<RequestId, std::vector<int32_t>>> submitted;
  for (const auto* document : {&first_document, &second_document, &first_document}) {
    for (const auto& prompt :
         OverOneDocument(*document, 3, static_cast<uint32_t>(submitted.size()))) {
      submitted.emplace_back(*engine->Submit(prompt, Greedy(40), nullptr), prompt);
    }
    RunToIdle(*engine);
  }
  for (const auto& [id, prompt] : submitted) {
    EXPECT_EQ(TokensOf(*engine, id), Unshared(model, prompt, 40)) << "request " << id;
  }
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.host_blocks_in_use, 0);
  EXPECT_LE(stats.host_blocks_cached, stats.host_blocks);
  // The second document's requests took the first's cached blocks' room, so the first's last
  // three prefill it again, at least in part.
  EXPECT_GT(stats.admission.prefix_hits, 0);
  EXPECT_LT(stats.admission.prefix_hit_tokens, 6 * 40);
  // A request that can never fit the host tier is refused when submitted.
  EXPECT_EQ(
      engine->Submit(Prompt(200, TinyConfig().vocab_size, 1), Greedy(40), nullptr).status().code(),
      absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace pulse
