// The device-driven sparse step's selection ops in their reference form: the top-k against an
// independent full sort of the host ranking, and the slot directory as a state machine against
// a model of its rules under random steps of picks, hits, misses, evictions and forgets.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/backend/reference/sparse_selection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse::reference {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The ranking the host selector has always used, written as a comparison: the higher score
// first, NaN after every number, -0 equal to +0, the lower index first among equals.
std::vector<int32_t> RankBySort(const std::vector<float>& scores, size_t picks) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const float x = scores[static_cast<size_t>(a)];
    const float y = scores[static_cast<size_t>(b)];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x > y;
  });
  order.resize(picks);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<float> TrickyScores(std::mt19937& rng, size_t count) {
  const std::vector<float> specials = {0.0f,
                                       -0.0f,
                                       kNan,
                                       kInf,
                                       -kInf,
                                       1.0f,
                                       -1.0f,
                                       std::numeric_limits<float>::denorm_min(),
                                       std::numeric_limits<float>::max()};
  std::uniform_int_distribution<int> kind(0, 3);
  std::uniform_int_distribution<size_t> special(0, specials.size() - 1);
  std::uniform_int_distribution<int> small(-3, 3);
  std::normal_distribution<float> normal;
  std::vector<float> scores(count);
  for (float& score : scores) {
    switch (kind(rng)) {
      case 0:
        score = specials[special(rng)];
        break;
      case 1:
        score = static_cast<float>(small(rng));
        break;  // many ties
      default:
        score = normal(rng);
        break;
    }
  }
  return scores;
}

TEST(ReferenceSelectTopTest, PicksWhatAFullSortOfTheHostRankingPicks) {
  std::mt19937 rng(7);
  for (size_t count = 0; count <= 300; count += (count < 20 ? 1 : 37)) {
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<float> scores = TrickyScores(rng, count);
      const size_t picks = std::uniform_int_distribution<size_t>(0, count)(rng);
      std::vector<int32_t> picked(picks, -1);
      SelectTop(scores, picked);
      ASSERT_EQ(picked, RankBySort(scores, picks)) << count << " candidates, " << picks;
    }
  }
}

TEST(ReferenceSelectTopTest, SegmentsPickEachSetIntoItsPlace) {
  // Two segments: 5 candidates in 2 sets picking 2, then 3 candidates in 2 sets picking 3.
  const std::vector<float> scores = {1,      5, 3, kNan,       4,    /**/ 0, -0.0f, 2, -1, 2,
                                     /**/ 9, 9, 9, /**/ -kInf, kNan, kInf};
  const std::vector<ScoreSegment> segments = {
      {.first = 0, .count = 5, .num_sets = 2, .scores_first = 0, .picks = 2, .picks_first = 0},
      {.first = 5, .count = 3, .num_sets = 2, .scores_first = 10, .picks = 3, .picks_first = 4}};
  std::vector<int32_t> picked(10, -7);
  ASSERT_TRUE(SelectTopBlocks(scores, segments, picked).ok());
  EXPECT_THAT(picked, ::testing::ElementsAre(1, 4, 2, 4, 0, 1, 2, 0, 1, 2));

  const std::vector<ScoreSegment> too_many = {{.count = 2, .picks = 3}};
  EXPECT_EQ(SelectTopBlocks(scores, too_many, picked).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<ScoreSegment> outside = {{.count = 5, .scores_first = 14, .picks = 1}};
  EXPECT_EQ(SelectTopBlocks(scores, outside, picked).code(), absl::StatusCode::kInvalidArgument);
}

// --- the slot directory ----------------------------------------------------------------------

constexpr int32_t kFirstSlot = 100;

// Device state of a directory and one layer's step buffers, in plain vectors.
struct Directory {
  Directory(int32_t sets, int32_t slots, int32_t blocks, bool score_aware)
      : slot_of_block(static_cast<size_t>(sets * blocks), -1),
        block_of_slot(static_cast<size_t>(sets * slots), -1),
        last_used(static_cast<size_t>(sets * slots), -1),
        score(static_cast<size_t>(sets * slots), 0) {
    view = {.num_sets = sets,
            .num_slots = slots,
            .num_blocks = blocks,
            .first_slot = kFirstSlot,
            .score_aware = score_aware ? 1 : 0,
            .slot_of_block = slot_of_block.data(),
            .block_of_slot = block_of_slot.data(),
            .last_used = last_used.data(),
            .score = score.data()};
  }
  std::vector<int32_t> slot_of_block;
  std::vector<int32_t> block_of_slot;
  std::vector<int32_t> last_used;
  std::vector<uint64_t> score;
  SlotDirectoryView view;
};

// The directory's rules, written independently: per set, block -> slot and each slot's state.
struct Model {
  struct Slot {
    int32_t block = -1;
    int32_t last_used = -1;
    float score = 0.0f;
  };
  std::vector<std::map<int32_t, int32_t>> slot_of;
  std::vector<std::vector<Slot>> slots;
  bool score_aware = false;

  uint64_t Key(const Slot& slot) const {
    if (slot.block < 0) return 0;
    const uint64_t recency = static_cast<uint32_t>(slot.last_used + 1);
    if (!score_aware) return recency;
    // Lower scores leave first: order the floats (never NaN here) as unsigned integers.
    uint32_t bits = 0;
    const float value = slot.score + 0.0f;
    std::memcpy(&bits, &value, sizeof(bits));
    const uint32_t ordered = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
    return uint64_t{ordered} << 32 | recency;
  }
};

// One random step: rows of random picks (offloaded rows pick host blocks, others dense blocks).
struct Step {
  std::vector<ScoreSegment> segments;
  std::vector<SparseTableRow> rows;
  std::vector<float> scores;
  std::vector<int32_t> picked;
  std::vector<int32_t> candidate_blocks;
  std::vector<int32_t> summary_ids;
  std::vector<int32_t> fixed;
};

TEST(ReferenceSlotDirectoryTest, RandomStepsFollowTheDirectorysRules) {
  std::mt19937 rng(11);
  for (const bool score_aware : {false, true}) {
    for (const int32_t sets : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "score-aware " << score_aware << ", sets " << sets);
      constexpr int32_t kSlots = 6;
      constexpr int32_t kBlocks = 24;
      constexpr int32_t kSummaries = 64;
      constexpr int32_t kStride = 12;
      Directory directory(sets, kSlots, kBlocks, score_aware);
      Model model{.slot_of = std::vector<std::map<int32_t, int32_t>>(static_cast<size_t>(sets)),
                  .slots = std::vector<std::vector<Model::Slot>>(static_cast<size_t>(sets),
                                                                 std::vector<Model::Slot>(kSlots)),
                  .score_aware = score_aware};
      std::vector<int32_t> pick_stamps(static_cast<size_t>(sets * kSummaries), -1);
      std::vector<std::vector<int32_t>> last_picks(static_cast<size_t>(sets));
      int64_t evictions_seen = 0;
      for (int32_t step = 1; step <= 300; ++step) {
        // Between steps, sometimes a request ends: its blocks leave the directory.
        if (step % 17 == 0) {
          std::vector<int32_t> forget;
          for (int32_t b = 0; b < kBlocks; b += 3) forget.push_back(b + step % 3);
          ForgetSlots(directory.view, forget);
          for (int32_t s = 0; s < sets; ++s) {
            for (const int32_t b : forget) {
              const auto it = model.slot_of[static_cast<size_t>(s)].find(b);
              if (it == model.slot_of[static_cast<size_t>(s)].end()) continue;
              model.slots[static_cast<size_t>(s)][static_cast<size_t>(it->second)] = {};
              model.slot_of[static_cast<size_t>(s)].erase(it);
            }
          }
        }
        // Up to three rows; offloaded rows take host blocks from disjoint ranges, so that one
        // step never picks a block twice; each set picks at most kSlots blocks in all.
        Step batch;
        const int32_t num_rows = std::uniform_int_distribution<int32_t>(1, 3)(rng);
        int32_t picks_before = 0;
        for (int32_t r = 0; r < num_rows; ++r) {
          const bool offloaded = r != 1;
          const int32_t count = std::uniform_int_distribution<int32_t>(2, 8)(rng);
          const int32_t room = kSlots - picks_before;
          const int32_t picks =
              std::uniform_int_distribution<int32_t>(0, std::min(room, count))(rng);
          const auto first = static_cast<int32_t>(batch.candidate_blocks.size());
          for (int32_t i = 0; i < count; ++i) {
            batch.candidate_blocks.push_back(offloaded ? r * 8 + i : 1000 + 10 * r + i);
            batch.summary_ids.push_back(r * 10 + i);
          }
          batch.segments.push_back({.first = first,
                                    .count = count,
                                    .num_sets = sets,
                                    .scores_first = first * sets,
                                    .picks = picks,
                                    .picks_first = picks_before * sets});
          for (int32_t s = 0; s < sets; ++s) {
            for (int32_t i = 0; i < count; ++i) {
              batch.scores.push_back(
                  static_cast<float>(std::uniform_int_distribution<int>(0, 4)(rng)));
            }
          }
          const auto fixed_first = static_cast<int32_t>(batch.fixed.size());
          batch.fixed.insert(batch.fixed.end(), {7000 + r, 8000 + r});
          batch.rows.push_back({.segment = r,
                                .fixed_first = fixed_first,
                                .sink_blocks = 1,
                                .window_blocks = 1,
                                .kv_len = 10 + r,
                                .offloaded = offloaded ? 1 : 0,
                                .picks_before = picks_before});
          picks_before += picks;
        }
        batch.picked.resize(static_cast<size_t>(picks_before * sets));
        ASSERT_TRUE(SelectTopBlocks(batch.scores, batch.segments, batch.picked).ok());

        std::vector<int32_t> tables(static_cast<size_t>(num_rows * sets * kStride), -9);
        std::vector<int32_t> kv_lens(static_cast<size_t>(num_rows * sets), -9);
        std::vector<RecallEntry> entries(static_cast<size_t>(sets * kSlots));
        std::vector<int32_t> counts(static_cast<size_t>(sets), -9);
        std::vector<int64_t> counters(static_cast<size_t>(num_rows * kSparseCounters), 0);
        const SparseTableBuild build{
            .segments = batch.segments.data(),
            .rows = batch.rows.data(),
            .num_rows = num_rows,
            .num_sets = sets,
            .picked = batch.picked.data(),
            .scores = batch.scores.data(),
            .candidate_blocks = batch.candidate_blocks.data(),
            .summary_ids = batch.summary_ids.data(),
            .fixed_blocks = batch.fixed.data(),
            .step = &step,
            .pick_stamps = pick_stamps.data(),
            .num_summaries = kSummaries,
            .directory = directory.view,
            .tables = tables.data(),
            .table_stride = kStride,
            .kv_lens = kv_lens.data(),
            .recalls = {.entries = entries.data(), .counts = counts.data(), .capacity = kSlots},
            .counters = counters.data()};
        ASSERT_TRUE(BuildSparseTables(build).ok());

        // The model's step, set by set.
        int64_t hits = 0;
        int64_t misses = 0;
        int64_t evictions = 0;
        int64_t reused = 0;
        for (int32_t s = 0; s < sets; ++s) {
          auto& slot_of = model.slot_of[static_cast<size_t>(s)];
          auto& slots = model.slots[static_cast<size_t>(s)];
          std::vector<std::pair<int32_t, float>> missed;  // (block, score) in row, pick order
          std::vector<int32_t> picks_now;
          for (int32_t r = 0; r < num_rows; ++r) {
            const ScoreSegment& segment = batch.segments[static_cast<size_t>(r)];
            const int32_t* table = tables.data() + (r * sets + s) * kStride;
            EXPECT_EQ(kv_lens[static_cast<size_t>(r * sets + s)], 10 + r);
            EXPECT_EQ(table[0], 7000 + r);
            EXPECT_EQ(table[1 + segment.picks], 8000 + r);
            for (int32_t j = 0; j < segment.picks; ++j) {
              const int32_t pick =
                  batch.picked[static_cast<size_t>(segment.picks_first + s * segment.picks + j)];
              const int32_t block =
                  batch.candidate_blocks[static_cast<size_t>(segment.first + pick)];
              const float score =
                  batch
                      .scores[static_cast<size_t>(segment.scores_first + s * segment.count + pick)];
              picks_now.push_back(batch.summary_ids[static_cast<size_t>(segment.first + pick)]);
              if (!batch.rows[static_cast<size_t>(r)].offloaded) {
                EXPECT_EQ(table[1 + j], block);
                continue;
              }
              const auto it = slot_of.find(block);
              if (it != slot_of.end()) {
                Model::Slot& slot = slots[static_cast<size_t>(it->second)];
                slot.score = slot.last_used == step ? std::max(slot.score, score) : score;
                slot.last_used = step;
                ++hits;
              } else {
                missed.emplace_back(block, score);
              }
            }
          }
          std::vector<std::pair<uint64_t, int32_t>> order;
          for (int32_t slot = 0; slot < kSlots; ++slot) {
            if (slots[static_cast<size_t>(slot)].last_used < step) {
              order.emplace_back(model.Key(slots[static_cast<size_t>(slot)]), slot);
            }
          }
          std::sort(order.begin(), order.end());
          ASSERT_LE(missed.size(), order.size());
          std::vector<int32_t> victims;
          for (size_t i = 0; i < missed.size(); ++i) victims.push_back(order[i].second);
          std::sort(victims.begin(), victims.end());
          ASSERT_EQ(counts[static_cast<size_t>(s)], static_cast<int32_t>(missed.size()));
          for (size_t i = 0; i < missed.size(); ++i) {
            Model::Slot& slot = slots[static_cast<size_t>(victims[i])];
            if (slot.block >= 0) {
              slot_of.erase(slot.block);
              ++evictions;
            }
            slot = {missed[i].first, step, missed[i].second};
            slot_of[missed[i].first] = victims[i];
            const RecallEntry& entry = entries[static_cast<size_t>(s * kSlots) + i];
            EXPECT_EQ(entry.host_block, missed[i].first);
            EXPECT_EQ(entry.slot, victims[i]);
            EXPECT_EQ(tables[static_cast<size_t>(entry.table_index)], kFirstSlot + victims[i]);
            ++misses;
          }
          // Every offloaded pick's table entry names the slot that now holds its block: no pick
          // of this step was evicted by another.
          for (int32_t r = 0; r < num_rows; ++r) {
            if (!batch.rows[static_cast<size_t>(r)].offloaded) continue;
            const ScoreSegment& segment = batch.segments[static_cast<size_t>(r)];
            for (int32_t j = 0; j < segment.picks; ++j) {
              const int32_t pick =
                  batch.picked[static_cast<size_t>(segment.picks_first + s * segment.picks + j)];
              const int32_t block =
                  batch.candidate_blocks[static_cast<size_t>(segment.first + pick)];
              ASSERT_TRUE(slot_of.contains(block));
              EXPECT_EQ(tables[static_cast<size_t>((r * sets + s) * kStride + 1 + j)],
                        kFirstSlot + slot_of[block]);
            }
          }
          // The directory equals the model's, both ways.
          for (int32_t slot = 0; slot < kSlots; ++slot) {
            const Model::Slot& want = slots[static_cast<size_t>(slot)];
            const size_t at = static_cast<size_t>(s * kSlots + slot);
            ASSERT_EQ(directory.block_of_slot[at], want.block) << "slot " << slot;
            if (want.block < 0) continue;
            EXPECT_EQ(directory.last_used[at], want.last_used);
            EXPECT_EQ(directory.score[at], StampedScore(want.last_used, want.score));
          }
          for (int32_t b = 0; b < kBlocks; ++b) {
            const auto it = slot_of.find(b);
            EXPECT_EQ(directory.slot_of_block[static_cast<size_t>(s * kBlocks + b)],
                      it == slot_of.end() ? -1 : it->second);
          }
          std::sort(picks_now.begin(), picks_now.end());
          for (const int32_t summary : picks_now) {
            reused += std::binary_search(last_picks[static_cast<size_t>(s)].begin(),
                                         last_picks[static_cast<size_t>(s)].end(), summary);
          }
          last_picks[static_cast<size_t>(s)] = picks_now;
        }
        std::vector<int64_t> totals(kSparseCounters, 0);
        for (int32_t r = 0; r < num_rows; ++r) {
          for (int32_t c = 0; c < kSparseCounters; ++c) {
            totals[static_cast<size_t>(c)] +=
                counters[static_cast<size_t>(r * kSparseCounters + c)];
          }
          // A row that is not offloaded has no hits or misses.
          if (!batch.rows[static_cast<size_t>(r)].offloaded) {
            EXPECT_EQ(counters[static_cast<size_t>(r * kSparseCounters + kSparseHits)], 0);
          }
        }
        EXPECT_EQ(totals[kSparseHits], hits);
        EXPECT_EQ(totals[kSparseMisses], misses);
        EXPECT_EQ(totals[kSparseEvictions], evictions);
        EXPECT_EQ(totals[kSparseReused], reused);
        EXPECT_EQ(totals[kSparseOverflow], 0);
        evictions_seen += evictions;
      }
      EXPECT_GT(evictions_seen, 50);
    }
  }
}

// One step of a single offloaded row picking `blocks` (one set): its table, counters added.
void RunOffloadedStep(Directory& directory, std::vector<int32_t>& pick_stamps, int32_t step,
                      std::vector<int32_t> blocks, std::vector<int64_t>& counters,
                      std::vector<int32_t>& tables) {
  const auto count = static_cast<int32_t>(blocks.size());
  const std::vector<ScoreSegment> segments = {
      {.first = 0, .count = count, .num_sets = 1, .picks = count}};
  const std::vector<SparseTableRow> rows = {{.offloaded = 1}};
  std::vector<int32_t> picked(blocks.size());
  std::iota(picked.begin(), picked.end(), 0);
  const std::vector<float> scores(blocks.size(), 1.0f);
  std::vector<RecallEntry> entries(static_cast<size_t>(directory.view.num_slots));
  std::vector<int32_t> counts(1);
  std::vector<int32_t> kv_lens(1);
  tables.assign(blocks.size(), -9);
  ASSERT_TRUE(BuildSparseTables({.segments = segments.data(),
                                 .rows = rows.data(),
                                 .num_rows = 1,
                                 .num_sets = 1,
                                 .picked = picked.data(),
                                 .scores = scores.data(),
                                 .candidate_blocks = blocks.data(),
                                 .summary_ids = blocks.data(),
                                 .fixed_blocks = blocks.data(),
                                 .step = &step,
                                 .pick_stamps = pick_stamps.data(),
                                 .num_summaries = static_cast<int32_t>(pick_stamps.size()),
                                 .directory = directory.view,
                                 .tables = tables.data(),
                                 .table_stride = count,
                                 .kv_lens = kv_lens.data(),
                                 .recalls = {.entries = entries.data(),
                                             .counts = counts.data(),
                                             .capacity = directory.view.num_slots},
                                 .counters = counters.data()})
                  .ok());
}

// Least recently used leaves first; free slots go first, in slot order; a slot used this step
// never leaves; misses beyond the evictable slots are an overflow, and the table names slot 0.
TEST(ReferenceSlotDirectoryTest, VictimsAreLeastRecentlyUsedAndOverflowIsCounted) {
  Directory directory(1, 3, 10, false);
  std::vector<int32_t> pick_stamps(10, -1);
  std::vector<int64_t> counters(kSparseCounters, 0);
  std::vector<int32_t> tables;
  RunOffloadedStep(directory, pick_stamps, 1, {4, 5}, counters, tables);  // free slots 0 and 1
  EXPECT_THAT(tables, ::testing::ElementsAre(kFirstSlot + 0, kFirstSlot + 1));
  RunOffloadedStep(directory, pick_stamps, 2, {6}, counters, tables);  // free slot 2
  RunOffloadedStep(directory, pick_stamps, 3, {5, 7}, counters,
                   tables);  // 5 hits; 7 evicts block 4 (step 1), not 6 (step 2)
  EXPECT_THAT(tables, ::testing::ElementsAre(kFirstSlot + 1, kFirstSlot + 0));
  EXPECT_EQ(directory.slot_of_block[4], -1);
  EXPECT_EQ(counters[kSparseEvictions], 1);
  RunOffloadedStep(directory, pick_stamps, 4, {1, 2, 3, 8}, counters,
                   tables);  // four misses, three slots: one overflows
  EXPECT_EQ(counters[kSparseOverflow], 1);
  EXPECT_EQ(tables[3], kFirstSlot);
}

// Rows that pick one missing block (requests sharing a cached prefix) share one recall: the
// first pick of it in row and pick order misses and takes a victim, the later ones follow it
// into the same slot and count as hits; followers of a miss that overflows overflow too.
TEST(ReferenceSlotDirectoryTest, RowsThatMissOneBlockShareItsRecall) {
  const std::vector<std::vector<int32_t>> picks = {{5, 2}, {5, 6}, {2, 5}};
  Directory directory(1, 4, 10, false);
  std::vector<int32_t> pick_stamps(10, -1);
  const auto run = [&](int32_t step, const std::vector<std::vector<int32_t>>& rows_blocks,
                       std::vector<int64_t>& counters, std::vector<RecallEntry>& entries) {
    std::vector<ScoreSegment> segments;
    std::vector<SparseTableRow> rows;
    std::vector<int32_t> candidates;
    std::vector<int32_t> picked;
    for (const std::vector<int32_t>& blocks : rows_blocks) {
      const auto first = static_cast<int32_t>(candidates.size());
      const auto count = static_cast<int32_t>(blocks.size());
      segments.push_back({.first = first,
                          .count = count,
                          .num_sets = 1,
                          .scores_first = first,
                          .picks = count,
                          .picks_first = first});
      rows.push_back(
          {.segment = static_cast<int32_t>(rows.size()), .offloaded = 1, .picks_before = first});
      candidates.insert(candidates.end(), blocks.begin(), blocks.end());
      for (int32_t i = 0; i < count; ++i) picked.push_back(i);
    }
    const std::vector<float> scores(candidates.size(), 1.0f);
    const auto num_rows = static_cast<int32_t>(rows.size());
    std::vector<int32_t> tables(static_cast<size_t>(num_rows * 2), -9);
    std::vector<int32_t> kv_lens(rows.size());
    std::vector<int32_t> counts(1);
    entries.assign(4, {});
    counters.assign(static_cast<size_t>(num_rows * kSparseCounters), 0);
    EXPECT_TRUE(BuildSparseTables(
                    {.segments = segments.data(),
                     .rows = rows.data(),
                     .num_rows = num_rows,
                     .num_sets = 1,
                     .picked = picked.data(),
                     .scores = scores.data(),
                     .candidate_blocks = candidates.data(),
                     .summary_ids = candidates.data(),
                     .fixed_blocks = candidates.data(),
                     .step = &step,
                     .pick_stamps = pick_stamps.data(),
                     .num_summaries = 10,
                     .directory = directory.view,
                     .tables = tables.data(),
                     .table_stride = 2,
                     .kv_lens = kv_lens.data(),
                     .recalls = {.entries = entries.data(), .counts = counts.data(), .capacity = 4},
                     .counters = counters.data()})
                    .ok());
    entries.resize(static_cast<size_t>(counts[0]));
    return tables;
  };
  const auto counter = [](const std::vector<int64_t>& counters, int32_t row, SparseCounter which) {
    return counters[static_cast<size_t>(row * kSparseCounters + which)];
  };
  std::vector<int64_t> counters;
  std::vector<RecallEntry> entries;
  // Blocks 5, 2 and 6 take free slots 0, 1 and 2 in the order of their first picks.
  EXPECT_THAT(run(1, picks, counters, entries),
              ::testing::ElementsAre(kFirstSlot + 0, kFirstSlot + 1, kFirstSlot + 0, kFirstSlot + 2,
                                     kFirstSlot + 1, kFirstSlot + 0));
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(
      std::vector<int32_t>({entries[0].host_block, entries[1].host_block, entries[2].host_block}),
      std::vector<int32_t>({5, 2, 6}));
  EXPECT_EQ(std::vector<int64_t>({counter(counters, 0, kSparseMisses),
                                  counter(counters, 1, kSparseMisses),
                                  counter(counters, 2, kSparseMisses)}),
            std::vector<int64_t>({2, 1, 0}));
  EXPECT_EQ(
      std::vector<int64_t>({counter(counters, 0, kSparseHits), counter(counters, 1, kSparseHits),
                            counter(counters, 2, kSparseHits)}),
      std::vector<int64_t>({0, 1, 2}));
  // The next step: all hits, no recall.
  run(2, picks, counters, entries);
  EXPECT_TRUE(entries.empty());
  // Block 5 hits slot 0; 1, 3, 4 and 7 miss and three slots are evictable (1 and 2 used at step
  // 2, 3 free), so 7 overflows, and so does row 2's pick of it, which follows that miss.
  EXPECT_THAT(run(3, {{1, 3}, {4, 7}, {7, 5}}, counters, entries),
              ::testing::ElementsAre(kFirstSlot + 1, kFirstSlot + 2, kFirstSlot + 3, kFirstSlot,
                                     kFirstSlot, kFirstSlot + 0));
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(std::vector<int64_t>({counter(counters, 0, kSparseOverflow),
                                  counter(counters, 1, kSparseOverflow),
                                  counter(counters, 2, kSparseOverflow)}),
            std::vector<int64_t>({0, 1, 1}));
}

// A small cache for AdoptFreeSlots: 2-token blocks of 2 KV heads of 4 f32 channels (key
// fragments then value fragments), dense block b filled with b * 1000 + its element index, the
// slots (from kFirstSlot on) with -1.
struct Cache {
  static constexpr PagedKvLayout kLayout{
      .block_tokens = 2, .num_kv_heads = 2, .head_dim = 4, .type = DType::kF32};
  explicit Cache(int32_t slots)
      : values(static_cast<size_t>((kFirstSlot + slots) * kLayout.block_elems()), -1.0f) {
    for (int32_t b = 0; b < kFirstSlot; ++b) {
      for (int64_t e = 0; e < kLayout.block_elems(); ++e) {
        values[static_cast<size_t>(b * kLayout.block_elems() + e)] =
            static_cast<float>(b * 1000 + e);
      }
    }
  }
  // Elements [first, first + count) of block `block`.
  std::vector<float> Elements(int32_t block, int64_t first, int64_t count) const {
    const auto begin = values.begin() + block * kLayout.block_elems() + first;
    return {begin, begin + count};
  }
  std::vector<float> values;
};

// Given-up blocks take the free slots in increasing order, one an entry; an entry whose block
// is already in a slot leaves its free slot free (and is copied into its slot again); entries
// past the free slots are not kept. The kept blocks are copied, stamped 0 and scored lowest, so
// that they are the first victims.
TEST(ReferenceSlotDirectoryTest, GivenUpBlocksFillTheFreeSlotsAndLeaveFirst) {
  Directory directory(1, 4, 10, false);
  Cache cache(4);
  // Block 7 is in slot 1, used by step 3.
  directory.block_of_slot[1] = 7;
  directory.slot_of_block[7] = 1;
  directory.last_used[1] = 3;
  const std::vector<WriteBackEntry> entries = {{2, 4}, {3, 7}, {5, 5}, {6, 6}};
  const SlotLayer layer{.directory = directory.view, .blocks = cache.values.data()};
  ASSERT_TRUE(AdoptFreeSlots({&layer, 1}, entries, Cache::kLayout).ok());
  EXPECT_THAT(directory.block_of_slot, ::testing::ElementsAre(4, 7, -1, 5));
  EXPECT_EQ(directory.slot_of_block[4], 0);
  EXPECT_EQ(directory.slot_of_block[5], 3);
  EXPECT_EQ(directory.slot_of_block[6], -1);
  EXPECT_EQ(directory.slot_of_block[7], 1);
  EXPECT_THAT(directory.last_used, ::testing::ElementsAre(0, 3, -1, 0));
  EXPECT_EQ(directory.score[0], StampedScore(0, -kInf));
  const int64_t elems = Cache::kLayout.block_elems();
  EXPECT_EQ(cache.Elements(kFirstSlot + 0, 0, elems), cache.Elements(2, 0, elems));
  EXPECT_EQ(cache.Elements(kFirstSlot + 3, 0, elems), cache.Elements(5, 0, elems));
  EXPECT_EQ(cache.Elements(kFirstSlot + 2, 0, elems), std::vector<float>(elems, -1.0f));
  // Block 7's slot gets its bytes again (the same bytes, outside a test).
  EXPECT_EQ(cache.Elements(kFirstSlot + 1, 0, elems), cache.Elements(3, 0, elems));

  // Misses take the free slot first, then the kept blocks before the one a step used.
  std::vector<int32_t> pick_stamps(10, -1);
  std::vector<int64_t> counters(kSparseCounters, 0);
  std::vector<int32_t> tables;
  RunOffloadedStep(directory, pick_stamps, 4, {4, 8}, counters, tables);  // 4 hits, 8 fills slot 2
  EXPECT_THAT(tables, ::testing::ElementsAre(kFirstSlot + 0, kFirstSlot + 2));
  RunOffloadedStep(directory, pick_stamps, 5, {9}, counters, tables);  // evicts kept block 5
  EXPECT_THAT(tables, ::testing::ElementsAre(kFirstSlot + 3));
  EXPECT_EQ(directory.slot_of_block[5], -1);
  EXPECT_EQ(directory.slot_of_block[7], 1);
  EXPECT_EQ(counters[kSparseHits], 1);
  EXPECT_EQ(counters[kSparseMisses], 2);
}

// Head-wise, each set keeps its own KV head's key and value fragments in its own free slots.
TEST(ReferenceSlotDirectoryTest, HeadWiseSetsKeepTheirHeadsFragments) {
  Directory directory(2, 2, 10, false);
  Cache cache(2);
  directory.block_of_slot[2] = 9;  // set 1, slot 0
  directory.slot_of_block[10 + 9] = 0;
  const SlotLayer layer{.directory = directory.view, .blocks = cache.values.data()};
  ASSERT_TRUE(
      AdoptFreeSlots({&layer, 1}, std::vector<WriteBackEntry>{{3, 4}}, Cache::kLayout).ok());
  EXPECT_EQ(directory.slot_of_block[4], 0);       // set 0: slot 0
  EXPECT_EQ(directory.slot_of_block[10 + 4], 1);  // set 1: slot 1
  const int64_t head = Cache::kLayout.head_elems();
  const int64_t values = Cache::kLayout.value_offset();
  for (const int64_t first : {int64_t{0}, values}) {
    EXPECT_EQ(cache.Elements(kFirstSlot + 0, first, head), cache.Elements(3, first, head));
    EXPECT_EQ(cache.Elements(kFirstSlot + 0, first + head, head), std::vector<float>(head, -1.0f));
    EXPECT_EQ(cache.Elements(kFirstSlot + 1, first + head, head),
              cache.Elements(3, first + head, head));
    EXPECT_EQ(cache.Elements(kFirstSlot + 1, first, head), std::vector<float>(head, -1.0f));
  }
}

TEST(ReferenceSlotDirectoryTest, AGivenUpBlockOutsideTheDensePoolIsRefused) {
  Directory directory(1, 2, 10, false);
  Cache cache(2);
  const SlotLayer layer{.directory = directory.view, .blocks = cache.values.data()};
  for (const WriteBackEntry entry :
       {WriteBackEntry{kFirstSlot, 1}, WriteBackEntry{-1, 1}, WriteBackEntry{1, 10}}) {
    EXPECT_EQ(
        AdoptFreeSlots({&layer, 1}, std::vector<WriteBackEntry>{{0, 0}, entry}, Cache::kLayout)
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(directory.block_of_slot, ::testing::ElementsAre(-1, -1));
}

}  // namespace
}  // namespace pulse::reference
