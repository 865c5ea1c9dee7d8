// The CUDA backend's device-driven sparse-step ops against the CPU backend's (the reference of
// core/backend/reference/sparse_selection.h), which must agree bit for bit: SelectTopBlocks over
// random scores with ties, -0, NaN and infinities at small and large candidate counts;
// BuildSparseTables over many random steps (solohead and headwise, LRU and score-aware, few and
// many slots: victims chosen among the chunks' candidates and among every slot, keys in shared
// memory and past it), comparing tables, recall lists, counters and the whole directory after each
// step; ForgetSlots, and AdoptFreeSlots. Skipped without a CUDA device.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"
#include "tests/unit/backend/op_test_util.h"

namespace pulse {
namespace {

using ::pulse::testing::MakeCpuBackend;

class CudaSparseSelectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::shared_ptr<Backend>> cuda = CreateCudaBackend({});
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    cuda_ = *cuda;
    cpu_ = MakeCpuBackend(2);
  }

  template <typename T>
  DeviceBuffer Upload(const std::vector<T>& values) {
    return ::pulse::testing::UploadVector(*cuda_, values);
  }
  template <typename T>
  std::vector<T> Download(const DeviceBuffer& buffer, size_t count) {
    return ::pulse::testing::DownloadVector<T>(*cuda_, buffer, count);
  }

  std::shared_ptr<Backend> cuda_;
  std::shared_ptr<Backend> cpu_;
};

std::vector<float> TrickyScores(std::mt19937& rng, size_t count) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {0.0f, -0.0f, nan, inf, -inf, 1.0f, -1.0f};
  std::uniform_int_distribution<int> kind(0, 3);
  std::uniform_int_distribution<size_t> special(0, specials.size() - 1);
  std::uniform_int_distribution<int> small(-3, 3);
  std::normal_distribution<float> normal;
  std::vector<float> scores(count);
  for (float& score : scores) {
    const int k = kind(rng);
    score = k == 0 ? specials[special(rng)] : k == 1 ? static_cast<float>(small(rng)) : normal(rng);
  }
  return scores;
}

TEST_F(CudaSparseSelectionTest, SelectTopBlocksPicksWhatTheCpuPicks) {
  std::mt19937 rng(3);
  for (const int32_t sets : {1, 8}) {
    std::vector<ScoreSegment> segments;
    int32_t scores_end = 0;
    int32_t picks_end = 0;
    for (const int32_t count : {0, 1, 2, 31, 255, 256, 257, 600, 4096, 9000}) {
      for (const int32_t picks : {0, 1, count / 3, count - 1, count}) {
        if (picks < 0 || picks > count) continue;
        segments.push_back({.first = 0,
                            .count = count,
                            .num_sets = sets,
                            .scores_first = scores_end,
                            .picks = picks,
                            .picks_first = picks_end});
        scores_end += sets * count;
        picks_end += sets * picks;
      }
    }
    const std::vector<float> scores = TrickyScores(rng, static_cast<size_t>(scores_end));
    std::vector<int32_t> want(static_cast<size_t>(picks_end), -1);
    cpu_->SelectTopBlocks(scores.data(), segments.data(), static_cast<int32_t>(segments.size()),
                          sets, want.data());
    ASSERT_TRUE(cpu_->Synchronize().ok());
    const DeviceBuffer device_scores = Upload(scores);
    const DeviceBuffer device_segments = Upload(segments);
    const DeviceBuffer picked = Upload(std::vector<int32_t>(want.size(), -1));
    cuda_->SelectTopBlocks(device_scores.as<float>(), device_segments.as<ScoreSegment>(),
                           static_cast<int32_t>(segments.size()), sets, picked.as<int32_t>());
    EXPECT_EQ(Download<int32_t>(picked, want.size()), want) << sets << " sets";
  }
}

// A directory and a layer's step, as host vectors (the CPU's) and their device copies.
struct TableCase {
  int32_t sets;
  int32_t slots;
  bool score_aware;
  // The offloaded rows' candidates start at one host block (requests sharing a cached prefix),
  // so that rows pick and miss the same blocks; each row keeps summaries of its own, since which
  // row counts a shared summary's pick as reused depends on timing on the device.
  bool shared = false;
};

TEST_F(CudaSparseSelectionTest, BuildSparseTablesMatchesTheCpuStepAfterStep) {
  for (const TableCase& c :
       {TableCase{1, 40, false}, TableCase{1, 40, true}, TableCase{8, 24, false},
        TableCase{1, 4096, false}, TableCase{2, 3000, true}, TableCase{1, 5000, true},
        TableCase{1, 70000, false}, TableCase{1, 70000, true}, TableCase{1, 40, true, true},
        TableCase{8, 24, false, true}, TableCase{1, 4096, true, true}}) {
    SCOPED_TRACE(::testing::Message() << c.sets << " sets, " << c.slots << " slots, score-aware "
                                      << c.score_aware << ", shared " << c.shared);
    std::mt19937 rng(static_cast<uint32_t>(c.sets * 7919 + c.slots));
    const int32_t blocks = 4 * c.slots + 50;
    const int32_t summaries = blocks + 8 * 1000;
    const int32_t stride = 2 + c.slots;
    std::vector<int32_t> slot_of_block(static_cast<size_t>(c.sets * blocks), -1);
    std::vector<int32_t> block_of_slot(static_cast<size_t>(c.sets * c.slots), -1);
    std::vector<int32_t> last_used(block_of_slot.size(), -1);
    std::vector<uint64_t> slot_scores(block_of_slot.size(), 0);
    std::vector<int32_t> pick_stamps(static_cast<size_t>(c.sets * summaries), -1);
    DeviceBuffer d_slot_of_block = Upload(slot_of_block);
    DeviceBuffer d_block_of_slot = Upload(block_of_slot);
    DeviceBuffer d_last_used = Upload(last_used);
    DeviceBuffer d_slot_scores = Upload(slot_scores);
    DeviceBuffer d_pick_stamps = Upload(pick_stamps);
    SlotDirectoryView host_directory{.num_sets = c.sets,
                                     .num_slots = c.slots,
                                     .num_blocks = blocks,
                                     .first_slot = 17,
                                     .score_aware = c.score_aware ? 1 : 0,
                                     .slot_of_block = slot_of_block.data(),
                                     .block_of_slot = block_of_slot.data(),
                                     .last_used = last_used.data(),
                                     .score = slot_scores.data()};
    SlotDirectoryView device_directory = host_directory;
    device_directory.slot_of_block = d_slot_of_block.as<int32_t>();
    device_directory.block_of_slot = d_block_of_slot.as<int32_t>();
    device_directory.last_used = d_last_used.as<int32_t>();
    device_directory.score = d_slot_scores.as<uint64_t>();

    for (int32_t step = 1; step <= 40; ++step) {
      if (step % 9 == 0) {
        std::vector<int32_t> forget;
        for (int32_t b = step % 5; b < blocks; b += 5) forget.push_back(b);
        cpu_->ForgetSlots(host_directory, forget.data(), static_cast<int32_t>(forget.size()));
        const DeviceBuffer d_forget = Upload(forget);
        cuda_->ForgetSlots(device_directory, d_forget.as<int32_t>(),
                           static_cast<int32_t>(forget.size()));
      }
      // Rows of random picks over disjoint host-block ranges (or, shared, over one); the sets
      // pick at most `slots`.
      const int32_t rows = std::uniform_int_distribution<int32_t>(1, 8)(rng);
      const int32_t range = blocks / rows;
      std::vector<ScoreSegment> segments;
      std::vector<SparseTableRow> table_rows;
      std::vector<int32_t> picked;
      std::vector<float> scores;
      std::vector<int32_t> candidates;
      std::vector<int32_t> summary_ids;
      std::vector<int32_t> fixed;
      int32_t picks_before = 0;
      for (int32_t r = 0; r < rows; ++r) {
        const bool offloaded = r % 4 != 3;
        const int32_t count = std::uniform_int_distribution<int32_t>(1, std::min(range, 900))(rng);
        const int32_t room = c.slots - picks_before;
        const int32_t picks = std::uniform_int_distribution<int32_t>(
            0, std::min({room, count, c.slots / rows + 8}))(rng);
        const auto first = static_cast<int32_t>(candidates.size());
        // Candidates are a random subset of the row's range; recently used blocks come back often.
        for (int32_t i = 0; i < count; ++i) {
          candidates.push_back(offloaded ? (c.shared ? i : r * range + i) : 5000 + i);
          summary_ids.push_back(offloaded ? r * range + i : blocks + r * 1000 + i);
        }
        segments.push_back({.first = first,
                            .count = count,
                            .num_sets = c.sets,
                            .scores_first = static_cast<int32_t>(scores.size()),
                            .picks = picks,
                            .picks_first = static_cast<int32_t>(picked.size())});
        for (int32_t s = 0; s < c.sets; ++s) {
          for (int32_t i = 0; i < count; ++i) {
            scores.push_back(static_cast<float>(std::uniform_int_distribution<int>(-2, 2)(rng)));
          }
          std::vector<int32_t> all(static_cast<size_t>(count));
          std::iota(all.begin(), all.end(), 0);
          // Skewed towards low indices so that picks repeat from step to step.
          std::shuffle(all.begin(), all.begin() + std::min(count, picks * 2 + 1), rng);
          std::vector<int32_t> chosen(all.begin(), all.begin() + picks);
          std::sort(chosen.begin(), chosen.end());
          picked.insert(picked.end(), chosen.begin(), chosen.end());
        }
        const auto fixed_first = static_cast<int32_t>(fixed.size());
        fixed.insert(fixed.end(), {900 + r, 901 + r, 902 + r});
        table_rows.push_back({.segment = r,
                              .fixed_first = fixed_first,
                              .sink_blocks = 1,
                              .window_blocks = 2,
                              .kv_len = 64 + r,
                              .offloaded = offloaded ? 1 : 0,
                              .picks_before = picks_before});
        picks_before += picks;
      }
      const size_t table_ints = static_cast<size_t>(rows * c.sets * stride);
      std::vector<int32_t> tables(table_ints, -5);
      std::vector<int32_t> kv_lens(static_cast<size_t>(rows * c.sets), -5);
      std::vector<RecallEntry> entries(static_cast<size_t>(c.sets * c.slots));
      std::vector<int32_t> counts(static_cast<size_t>(c.sets), -5);
      std::vector<int64_t> counters(static_cast<size_t>(rows * kSparseCounters), 0);
      SparseTableBuild build{
          .segments = segments.data(),
          .rows = table_rows.data(),
          .num_rows = rows,
          .num_sets = c.sets,
          .picked = picked.data(),
          .scores = scores.data(),
          .candidate_blocks = candidates.data(),
          .summary_ids = summary_ids.data(),
          .fixed_blocks = fixed.data(),
          .step = &step,
          .pick_stamps = pick_stamps.data(),
          .num_summaries = summaries,
          .directory = host_directory,
          .tables = tables.data(),
          .table_stride = stride,
          .kv_lens = kv_lens.data(),
          .recalls = {.entries = entries.data(), .counts = counts.data(), .capacity = c.slots},
          .counters = counters.data()};
      cpu_->BuildSparseTables(build);
      ASSERT_TRUE(cpu_->Synchronize().ok());

      const DeviceBuffer d_segments = Upload(segments);
      const DeviceBuffer d_rows = Upload(table_rows);
      const DeviceBuffer d_picked = Upload(picked);
      const DeviceBuffer d_scores = Upload(scores);
      const DeviceBuffer d_candidates = Upload(candidates);
      const DeviceBuffer d_summary_ids = Upload(summary_ids);
      const DeviceBuffer d_fixed = Upload(fixed);
      const DeviceBuffer d_step = Upload(std::vector<int32_t>{step});
      const DeviceBuffer d_tables = Upload(std::vector<int32_t>(table_ints, -5));
      const DeviceBuffer d_kv_lens = Upload(std::vector<int32_t>(kv_lens.size(), -5));
      const DeviceBuffer d_entries = Upload(std::vector<RecallEntry>(entries.size()));
      const DeviceBuffer d_counts = Upload(std::vector<int32_t>(counts.size(), -5));
      const DeviceBuffer d_counters = Upload(std::vector<int64_t>(counters.size(), 0));
      SparseTableBuild device = build;
      device.segments = d_segments.as<ScoreSegment>();
      device.rows = d_rows.as<SparseTableRow>();
      device.picked = d_picked.as<int32_t>();
      device.scores = d_scores.as<float>();
      device.candidate_blocks = d_candidates.as<int32_t>();
      device.summary_ids = d_summary_ids.as<int32_t>();
      device.fixed_blocks = d_fixed.as<int32_t>();
      device.step = d_step.as<int32_t>();
      device.pick_stamps = d_pick_stamps.as<int32_t>();
      device.directory = device_directory;
      device.tables = d_tables.as<int32_t>();
      device.kv_lens = d_kv_lens.as<int32_t>();
      device.recalls = {.entries = d_entries.as<RecallEntry>(),
                        .counts = d_counts.as<int32_t>(),
                        .capacity = c.slots};
      device.counters = d_counters.as<int64_t>();
      cuda_->BuildSparseTables(device);

      ASSERT_EQ(Download<int32_t>(d_tables, table_ints), tables) << "step " << step;
      ASSERT_EQ(Download<int32_t>(d_kv_lens, kv_lens.size()), kv_lens);
      ASSERT_EQ(Download<int32_t>(d_counts, counts.size()), counts);
      const std::vector<RecallEntry> got = Download<RecallEntry>(d_entries, entries.size());
      for (int32_t s = 0; s < c.sets; ++s) {
        for (int32_t i = 0; i < counts[static_cast<size_t>(s)]; ++i) {
          const RecallEntry& a = got[static_cast<size_t>(s * c.slots + i)];
          const RecallEntry& b = entries[static_cast<size_t>(s * c.slots + i)];
          ASSERT_EQ(std::tie(a.host_block, a.slot, a.table_index),
                    std::tie(b.host_block, b.slot, b.table_index))
              << "set " << s << " miss " << i;
        }
      }
      ASSERT_EQ(Download<int64_t>(d_counters, counters.size()), counters);
      ASSERT_EQ(Download<int32_t>(d_slot_of_block, slot_of_block.size()), slot_of_block);
      ASSERT_EQ(Download<int32_t>(d_block_of_slot, block_of_slot.size()), block_of_slot);
      ASSERT_EQ(Download<int32_t>(d_last_used, last_used.size()), last_used);
      ASSERT_EQ(Download<uint64_t>(d_slot_scores, slot_scores.size()), slot_scores);
      ASSERT_EQ(Download<int32_t>(d_pick_stamps, pick_stamps.size()), pick_stamps);
    }
  }
}

// AdoptFreeSlots: random directories (about half the slots taken) over two layers, given-up
// blocks some of which already have a slot, one set (whole blocks) and four (a KV head's
// fragments each): the same directories and the same cache bytes as the CPU's.
TEST_F(CudaSparseSelectionTest, AdoptFreeSlotsMatchesTheCpu) {
  constexpr PagedKvLayout kLayout{
      .block_tokens = 8, .num_kv_heads = 4, .head_dim = 64, .type = DType::kBF16};
  constexpr int32_t kLayers = 2;
  constexpr int32_t kDense = 60;
  constexpr int32_t kSlots = 300;
  constexpr int32_t kBlocks = 1000;
  for (const int32_t sets : {1, 4}) {
    SCOPED_TRACE(::testing::Message() << sets << " sets");
    std::mt19937 rng(static_cast<uint32_t>(sets));
    const auto block_bytes = static_cast<size_t>(kLayout.block_bytes());
    std::vector<std::vector<uint8_t>> cache(kLayers);
    std::vector<std::vector<int32_t>> slot_of_block(kLayers);
    std::vector<std::vector<int32_t>> slot_state(kLayers);  // block_of_slot, last_used, score
    std::vector<DeviceBuffer> d_cache;
    std::vector<DeviceBuffer> d_slot_of_block;
    std::vector<DeviceBuffer> d_slot_state;
    std::vector<SlotLayer> host_layers;
    std::vector<SlotLayer> device_layers;
    const auto state_ints = static_cast<size_t>(sets * kSlots);
    for (int32_t l = 0; l < kLayers; ++l) {
      const auto layer = static_cast<size_t>(l);
      cache[layer].resize((kDense + kSlots) * block_bytes);
      for (uint8_t& byte : cache[layer]) byte = static_cast<uint8_t>(rng());
      slot_of_block[layer].assign(static_cast<size_t>(sets * kBlocks), -1);
      slot_state[layer].assign(4 * state_ints, -1);
      std::fill(slot_state[layer].begin() + 2 * state_ints, slot_state[layer].end(), 0);
      for (int32_t k = 0; k < sets; ++k) {
        for (int32_t slot = 0; slot < kSlots; ++slot) {
          if (rng() % 2 == 0) continue;
          const int32_t block = static_cast<int32_t>(rng() % kBlocks);
          int32_t& owner = slot_of_block[layer][static_cast<size_t>(k * kBlocks + block)];
          if (owner >= 0) continue;
          owner = slot;
          slot_state[layer][static_cast<size_t>(k * kSlots + slot)] = block;
          slot_state[layer][state_ints + static_cast<size_t>(k * kSlots + slot)] =
              static_cast<int32_t>(rng() % 50) + 1;
        }
      }
      d_cache.push_back(Upload(cache[layer]));
      d_slot_of_block.push_back(Upload(slot_of_block[layer]));
      d_slot_state.push_back(Upload(slot_state[layer]));
      const auto view = [&](int32_t* of_block, int32_t* state) {
        return SlotDirectoryView{.num_sets = sets,
                                 .num_slots = kSlots,
                                 .num_blocks = kBlocks,
                                 .first_slot = kDense,
                                 .slot_of_block = of_block,
                                 .block_of_slot = state,
                                 .last_used = state + state_ints,
                                 .score = reinterpret_cast<uint64_t*>(state + 2 * state_ints)};
      };
      host_layers.push_back(
          {.directory = view(slot_of_block[layer].data(), slot_state[layer].data()),
           .blocks = cache[layer].data()});
      device_layers.push_back({.directory = view(d_slot_of_block.back().as<int32_t>(),
                                                 d_slot_state.back().as<int32_t>()),
                               .blocks = d_cache.back().data()});
    }
    // Distinct host blocks (a few already in slots), dense blocks in any order.
    std::vector<int32_t> hosts(kBlocks);
    std::iota(hosts.begin(), hosts.end(), 0);
    std::shuffle(hosts.begin(), hosts.end(), rng);
    std::vector<WriteBackEntry> entries;
    for (int32_t i = 0; i < 220; ++i) {
      entries.push_back({static_cast<int32_t>(rng() % kDense), hosts[static_cast<size_t>(i)]});
    }
    cpu_->AdoptFreeSlots(host_layers.data(), kLayers, sets, kSlots, entries.data(),
                         static_cast<int32_t>(entries.size()), kLayout);
    ASSERT_TRUE(cpu_->Synchronize().ok());
    const DeviceBuffer d_layers = Upload(device_layers);
    const DeviceBuffer d_entries = Upload(entries);
    cuda_->AdoptFreeSlots(d_layers.as<SlotLayer>(), kLayers, sets, kSlots,
                          d_entries.as<WriteBackEntry>(), static_cast<int32_t>(entries.size()),
                          kLayout);
    for (int32_t l = 0; l < kLayers; ++l) {
      const auto layer = static_cast<size_t>(l);
      EXPECT_EQ(Download<int32_t>(d_slot_of_block[layer], slot_of_block[layer].size()),
                slot_of_block[layer]);
      EXPECT_EQ(Download<int32_t>(d_slot_state[layer], slot_state[layer].size()),
                slot_state[layer]);
      EXPECT_EQ(Download<uint8_t>(d_cache[layer], cache[layer].size()), cache[layer]);
    }
  }
}

}  // namespace
}  // namespace pulse
