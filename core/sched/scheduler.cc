#include "core/sched/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "core/kv/block_key.h"
#include "core/kv/block_table.h"
#include "core/offload/residency.h"

namespace pulse {

Scheduler::Scheduler(const SchedulerLimits& limits, int32_t num_blocks,
                     PinHostBlocksFn pin_host_blocks)
    : limits_(limits),
      pool_(num_blocks),
      host_pool_(limits.host_blocks, /*track_released=*/true),
      pin_host_blocks_(std::move(pin_host_blocks)),
      policy_(limits.admission, limits.min_budget_tokens) {}

int32_t Scheduler::BlocksNeeded(const Request& request) const {
  if (!request.offload) return BlocksForTokens(request.max_kv_tokens(), limits_.block_tokens);
  return PeakDeviceBlocks(*request.offload, limits_.block_tokens, request.prompt_tokens,
                          request.max_kv_tokens());
}

int32_t Scheduler::StagedBlocksNeeded(const Request& request) const {
  return PeakDeviceBlocks(*request.offload, limits_.block_tokens, 0, request.max_kv_tokens());
}

absl::Status Scheduler::CanEverFit(const Request& request) const {
  const int32_t block_tokens = limits_.block_tokens;
  if (!request.offload && BlocksNeeded(request) > pool_.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request needs KV for %d tokens (%d blocks), more than the whole cache holds (%d "
        "blocks of %d tokens)",
        request.max_kv_tokens(), BlocksNeeded(request), pool_.capacity(), block_tokens));
  }
  // Its prompt may be prefilled staged, holding its sinks and window only.
  if (request.offload && StagedBlocksNeeded(request) > pool_.capacity()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request needs %d KV blocks of %d tokens resident at once (its sinks and window), "
        "more than the KV cache holds (%d)",
        StagedBlocksNeeded(request), block_tokens, pool_.capacity()));
  }
  if (!request.offload) return absl::OkStatus();
  const int32_t host_blocks = BlocksForTokens(request.max_kv_tokens(), block_tokens);
  if (host_blocks > host_pool_.capacity()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the request needs KV for %d tokens (%d blocks), more than the host tier "
                        "holds (%d blocks)",
                        request.max_kv_tokens(), host_blocks, host_pool_.capacity()));
  }
  if (SlotsNeeded(*request.offload, block_tokens, request.max_kv_tokens()) > limits_.slot_blocks) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request's budget of %d tokens selects up to %d blocks a step, more "
        "than the device tier's %d slots",
        request.offload->budget_tokens,
        SlotsNeeded(*request.offload, block_tokens, request.max_kv_tokens()), limits_.slot_blocks));
  }
  return absl::OkStatus();
}

void Scheduler::Enqueue(std::shared_ptr<Request> request) { queue_.push_back(std::move(request)); }

bool Scheduler::FitsResident(const Request& request, int32_t held) const {
  int32_t needed = BlocksForTokens(request.max_kv_tokens(), limits_.block_tokens) - held;
  // Room for another request only when the batch would have room for it: its resident set,
  // since a prompt the pool cannot hold is prefilled staged.
  if (request.offload && running() + 1 < limits_.max_batch) needed += StagedBlocksNeeded(request);
  return needed <= pool_.available();
}

absl::Status Scheduler::PinHostBlocks(int32_t more) {
  // The host tier is pinned as far as the pool may hand out blocks.
  if (!pin_host_blocks_) return absl::OkStatus();
  return pin_host_blocks_(host_pool_.IdsToHold(more));
}

bool Scheduler::DemoteOne(Admitted& admitted) {
  const int32_t block_tokens = limits_.block_tokens;
  // It and the head of the queue, each at the engine's average a row.
  if (limits_.admission != AdmissionKind::kIoAdaptive ||
      !AdmissionPolicy::RecallKeepsUp(RunningRecallBytes() + 2 * costs_.recall_bytes_per_row(),
                                      costs_)) {
    return false;
  }
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Request& request = **it;
    if (!request.engine_selection || request.offload || request.demoted || !request.decoding()) {
      continue;
    }
    const SelectionOptions& selection = *request.engine_selection;
    const int32_t slots = SlotsNeeded(selection, block_tokens, request.max_kv_tokens());
    const int32_t host_blocks = BlocksForTokens(request.max_kv_tokens(), block_tokens);
    if (slots_reserved_ + slots > limits_.slot_blocks || host_blocks > host_pool_.available() ||
        !PinHostBlocks(host_blocks).ok()) {
      continue;
    }
    const std::vector<int32_t> device(request.blocks->blocks().begin(),
                                      request.blocks->blocks().end());
    absl::StatusOr<OffloadedBlockTable> table = OffloadedBlockTable::FromResident(
        *request.blocks, &pool_, &host_pool_,
        PeakDeviceBlocks(selection, block_tokens, 0, request.max_kv_tokens()));
    if (!table.ok()) continue;
    // Its full blocks go to the host tier before the blocks that left its window are freed.
    TierMove& move = admitted.moves.emplace_back(TierMove{.request = *it, .to_host = true});
    const auto full = static_cast<size_t>(request.computed / block_tokens);
    move.device_blocks.assign(device.begin(), device.begin() + static_cast<ptrdiff_t>(full));
    move.host_blocks.assign(table->host_blocks().begin(),
                            table->host_blocks().begin() + static_cast<ptrdiff_t>(full));
    KeepResidentSet(*table, selection, block_tokens, request.computed);
    request.blocks.reset();
    request.offloaded_blocks = *std::move(table);
    request.offload = selection;
    request.slot_blocks = slots;
    request.demoted = true;
    slots_reserved_ += slots;
    ++offloaded_running_;
    ++admission_.demoted;
    return true;
  }
  return false;
}

void Scheduler::PromoteOne(Admitted& admitted) {
  if (limits_.admission != AdmissionKind::kIoAdaptive || !queue_.empty() || !costs_.measured()) {
    return;
  }
  for (const std::shared_ptr<Request>& running : running_) {
    Request& request = *running;
    if (!request.engine_selection || !request.offloaded_blocks || request.promoted ||
        !request.decoding() || !request.recall.measured()) {
      continue;
    }
    OffloadedBlockTable& table = *request.offloaded_blocks;
    if (!FitsResident(request, table.device_held())) continue;
    // The recall it would still cost, at its own rate, against the copy of its context back.
    const int64_t remaining =
        request.max_total_tokens - static_cast<int64_t>(request.tokens.size());
    const double context_bytes =
        static_cast<double>(table.host_blocks().size()) * static_cast<double>(limits_.block_bytes);
    if (static_cast<double>(remaining) * request.recall.bytes_per_step() < context_bytes) continue;
    absl::StatusOr<OffloadedBlockTable::Resident> resident = table.ToResident();
    if (!resident.ok()) continue;
    admitted.moves.push_back({.request = running,
                              .to_host = false,
                              .device_blocks = std::move(resident->recall_device),
                              .host_blocks = std::move(resident->recall_host)});
    request.blocks = std::move(resident->blocks);
    request.offloaded_blocks.reset();
    request.offload.reset();
    slots_reserved_ -= request.slot_blocks;
    request.slot_blocks = 0;
    request.promoted = true;
    --offloaded_running_;
    ++admission_.promoted;
    return;
  }
}

void Scheduler::CachePrompts(Admitted& admitted) {
  if (!limits_.prefix_cache) return;
  for (const std::shared_ptr<Request>& running : running_) {
    Request& request = *running;
    if (request.prompt_cached || request.generated() < 2) continue;
    request.prompt_cached = true;
    std::vector<BlockKey> keys = std::exchange(request.prompt_keys, {});
    if (keys.empty()) keys = PromptKeys(request);
    if (request.offloaded_blocks) {
      const std::span<const int32_t> host = request.offloaded_blocks->host_blocks();
      for (size_t j = 0; j < keys.size() && j < host.size(); ++j) {
        host_pool_.Cache(host[j], std::move(keys[j]));  // a block cached already keeps its key
      }
      continue;
    }
    // A resident request's prompt blocks not cached yet are copied to host blocks of their own
    // (summarized there), which the cache then keeps with no holder: when the host tier has room.
    TierMove move{.request = running, .to_host = true};
    std::vector<BlockKey> missing;
    for (size_t j = 0; j < keys.size(); ++j) {
      if (host_pool_.Find(keys[j])) continue;
      move.device_blocks.push_back(request.blocks->blocks()[j]);
      missing.push_back(std::move(keys[j]));
    }
    const auto count = static_cast<int32_t>(missing.size());
    if (count == 0 || !host_pool_.Reserve(count).ok()) continue;
    if (!PinHostBlocks(0).ok()) {
      host_pool_.Unreserve(count).IgnoreError();  // it reserved them
      continue;
    }
    for (BlockKey& key : missing) {
      const int32_t block = *host_pool_.Allocate();  // cannot fail: reserved
      host_pool_.Cache(block, std::move(key));
      move.host_blocks.push_back(block);
    }
    // The copy runs before the next step, ahead of any reader's; a block an allocation takes
    // back meanwhile loses its key first.
    for (const int32_t block : move.host_blocks) host_pool_.Free(block).IgnoreError();
    admitted.moves.push_back(std::move(move));
  }
}

std::vector<BlockKey> Scheduler::PromptKeys(const Request& request) const {
  return FullBlockKeys(std::span(request.tokens).first(static_cast<size_t>(request.prompt_tokens)),
                       limits_.block_tokens);
}

std::vector<int32_t> Scheduler::CachedPrefix(Request& request) const {
  std::vector<int32_t> prefix;
  if (!limits_.prefix_cache || !request.offload || request.computed > 0) return prefix;
  // A head that waits is looked up again each step: its keys are made once.
  if (request.prompt_keys.empty()) request.prompt_keys = PromptKeys(request);
  // At least one prompt token is left to compute.
  const auto usable = static_cast<size_t>((request.prompt_tokens - 1) / limits_.block_tokens);
  for (size_t j = 0; j < usable && j < request.prompt_keys.size(); ++j) {
    const std::optional<int32_t> block = host_pool_.Find(request.prompt_keys[j]);
    if (!block) break;
    prefix.push_back(*block);
  }
  return prefix;
}

Scheduler::Admitted Scheduler::Admit() {
  Admitted admitted;
  CachePrompts(admitted);
  MakeStagedResident(admitted);
  PromoteOne(admitted);
  while (!queue_.empty() && running() < limits_.max_batch) {
    Request& request = *queue_.front();
    const std::vector<int32_t> prefix = CachedPrefix(request);
    if (request.placed_by_engine && request.offload) {
      request.offload = request.engine_selection;  // not a budget lowered in an earlier round
    }
    // The head waits for running requests to finish; the ones behind it wait their turn. One
    // the engine places whose prompt starts with cached blocks runs offloaded, sharing them.
    if (request.placed_by_engine && request.offload && prefix.empty()) {
      const AdmissionView view{.fits_resident = FitsResident(request),
                               .offloaded_running = offloaded_running_,
                               .budget_tokens = request.offload->budget_tokens,
                               .running_recall_bytes = RunningRecallBytes(),
                               .costs = &costs_};
      const Placement placement = policy_.Place(view);
      if (placement == Placement::kWait) {
        const int32_t budget = policy_.LoweredBudget(view);
        if (budget == 0) {
          ++admission_.io_waits;
          break;
        }
        request.offload->budget_tokens = budget;
      }
      if (placement == Placement::kResident) request.offload.reset();
    }
    if (request.offload) {
      const int32_t slots =
          SlotsNeeded(*request.offload, limits_.block_tokens, request.max_kv_tokens());
      if (slots_reserved_ + slots > limits_.slot_blocks) break;
      // A cached prefix is read from the host tier: the rest of the prompt is prefilled staged.
      absl::StatusOr<OffloadedBlockTable> blocks = OffloadedBlockTable::Create(
          &pool_, &host_pool_, limits_.block_tokens, request.max_kv_tokens(),
          prefix.empty() ? BlocksNeeded(request) : StagedBlocksNeeded(request), prefix);
      if (!blocks.ok() && !prefix.empty()) break;
      if (!blocks.ok()) {
        // The dense pool cannot hold its prompt: demoting a resident request may make room.
        if (request.placed_by_engine && pool_.available() < BlocksNeeded(request) &&
            DemoteOne(admitted)) {
          continue;
        }
        // It waits while the offloaded requests holding more than their resident sets (prompts
        // being prefilled, or just in) would leave room for its prompt once they decode; else it
        // is prefilled staged, with its resident set's blocks only.
        if (BlocksNeeded(request) <= pool_.available() + BlocksOverResidentSets()) break;
        blocks = OffloadedBlockTable::Create(&pool_, &host_pool_, limits_.block_tokens,
                                             request.max_kv_tokens(), StagedBlocksNeeded(request));
        if (!blocks.ok()) break;
        request.staged = true;
        ++admission_.staged;
      }
      if (const absl::Status grown = PinHostBlocks(0); !grown.ok()) {
        // With nothing running, no pinned memory will come free for it: it can never run.
        if (running_.empty()) {
          admitted.rejected.push_back({std::move(queue_.front()), grown});
          queue_.pop_front();
        }
        break;
      }
      if (!prefix.empty()) {
        request.staged = true;
        request.computed = static_cast<int32_t>(prefix.size()) * limits_.block_tokens;
        ++admission_.prefix_hits;
        admission_.prefix_hit_tokens += request.computed;
      }
      request.offloaded_blocks = *std::move(blocks);
      request.slot_blocks = slots;
      slots_reserved_ += slots;
      ++offloaded_running_;
      ++admission_.offloaded;
      if (request.placed_by_engine &&
          request.offload->budget_tokens < request.engine_selection->budget_tokens) {
        ++admission_.lowered_budgets;
      }
    } else {
      absl::StatusOr<BlockTable> blocks =
          BlockTable::Create(&pool_, limits_.block_tokens, request.max_kv_tokens());
      if (!blocks.ok()) break;
      request.blocks = *std::move(blocks);
      if (limits_.slot_blocks > 0) ++admission_.resident;  // counted by an offloading engine
    }
    admitted.running.push_back(queue_.front());
    running_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return admitted;
}

void Scheduler::MakeStagedResident(Admitted& admitted) {
  for (const std::shared_ptr<Request>& running : running_) {
    Request& request = *running;
    if (!request.staged || !request.decoding()) continue;
    TierMove move{.request = running, .to_host = false};
    // Cannot fail: its table reserved its resident set.
    if (!MakeResidentSet(*request.offloaded_blocks, *request.offload, limits_.block_tokens,
                         request.computed, move.host_blocks, move.device_blocks)
             .ok()) {
      continue;
    }
    admitted.moves.push_back(std::move(move));
    request.staged = false;
  }
}

std::vector<ScheduledSequence> Scheduler::FormBatch() {
  std::vector<ScheduledSequence> batch;
  // Staged prompts' chunks run in a step of their own, every other step while other requests
  // have work.
  const bool staged = std::any_of(running_.begin(), running_.end(), [](const auto& request) {
    return request->staged && !request->decoding();
  });
  const bool others = std::any_of(running_.begin(), running_.end(), [](const auto& request) {
    return !request->staged || request->decoding();
  });
  if (staged && (!others || !last_batch_staged_)) {
    FormStagedBatch(batch);
    last_batch_staged_ = true;
    return batch;
  }
  last_batch_staged_ = false;
  int32_t budget = limits_.max_step_tokens;
  for (const std::shared_ptr<Request>& request : running_) {
    if (!request->decoding()) continue;
    batch.push_back({request, request->computed, 1, /*decode=*/true, /*sample=*/true});
    --budget;
  }
  for (const std::shared_ptr<Request>& request : running_) {
    if (budget == 0) break;
    if (request->decoding() || request->staged) continue;
    const int32_t count = std::min({request->uncomputed(), limits_.prefill_chunk, budget});
    batch.push_back({request, request->computed, count, /*decode=*/false,
                     /*sample=*/count == request->uncomputed()});
    budget -= count;
  }
  return batch;
}

void Scheduler::FormStagedBatch(std::vector<ScheduledSequence>& batch) const {
  // The first staged prompt's chunk, then the others' while the step's tokens and the staging
  // area hold them: the host blocks they share (a cached prefix) take one staging block, the
  // blocks a chunk adds one each.
  absl::flat_hash_set<int32_t> staged_blocks;  // the host blocks the chunks hold already
  int64_t grown_blocks = 0;                    // and the blocks they grow
  std::vector<int32_t> added;
  int32_t budget = limits_.max_step_tokens;
  for (const std::shared_ptr<Request>& request : running_) {
    if (!request->staged || request->decoding()) continue;
    const int32_t count = std::min({request->uncomputed(), limits_.prefill_chunk, budget});
    if (count == 0) break;
    const std::span<const int32_t> held = request->offloaded_blocks->host_blocks();
    const int32_t blocks = BlocksForTokens(request->computed + count, limits_.block_tokens);
    const int32_t known = std::min(blocks, static_cast<int32_t>(held.size()));
    added.clear();
    for (int32_t j = 0; j < known; ++j) {
      if (!staged_blocks.contains(held[static_cast<size_t>(j)])) {
        added.push_back(held[static_cast<size_t>(j)]);
      }
    }
    const int64_t staging =
        static_cast<int64_t>(staged_blocks.size() + added.size()) + grown_blocks + (blocks - known);
    if (!batch.empty() && staging > limits_.staging_blocks) continue;
    staged_blocks.insert(added.begin(), added.end());
    grown_blocks += blocks - known;
    batch.push_back({request, request->computed, count, /*decode=*/false,
                     /*sample=*/count == request->uncomputed()});
    budget -= count;
  }
}

void Scheduler::Remove(Request& request) {
  const auto same = [&request](const std::shared_ptr<Request>& r) { return r.get() == &request; };
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(), same), queue_.end());
  running_.erase(std::remove_if(running_.begin(), running_.end(), same), running_.end());
  request.blocks.reset();
  if (request.offloaded_blocks) --offloaded_running_;
  request.offloaded_blocks.reset();
  slots_reserved_ -= request.slot_blocks;
  request.slot_blocks = 0;
}

int32_t Scheduler::BlocksOverResidentSets() const {
  int32_t over = 0;
  for (const std::shared_ptr<Request>& request : running_) {
    if (!request->offloaded_blocks) continue;
    over += std::max(0, request->offloaded_blocks->device_held() - StagedBlocksNeeded(*request));
  }
  return over;
}

double Scheduler::RunningRecallBytes() const {
  double bytes = 0;
  for (const std::shared_ptr<Request>& request : running_) {
    if (!request->offloaded_blocks) continue;
    bytes += request->recall.measured() ? request->recall.bytes_per_step()
                                        : costs_.recall_bytes_per_row();
  }
  return bytes;
}

EngineStats::Admission Scheduler::admission_stats() const {
  EngineStats::Admission stats = admission_;
  stats.offloaded_running = offloaded_running_;
  stats.link_bytes_per_second = costs_.link_bytes_per_second();
  stats.recall_bytes_per_row = costs_.recall_bytes_per_row();
  stats.compute_ms = costs_.compute_seconds() * 1e3;
  stats.predicted_recall_ms = costs_.RecallSeconds(RunningRecallBytes()) * 1e3;
  return stats;
}

}  // namespace pulse
