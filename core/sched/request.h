// One generation request as the engine tracks it: its tokens, how far its KV cache is computed,
// its KV blocks, its sampler and sink, and its timeline. Guarded by the engine's lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kv/block_key.h"
#include "core/kv/block_table.h"
#include "core/offload/offloaded_block_table.h"
#include "core/offload/selection.h"
#include "core/sample/sampler.h"
#include "core/sample/sampling_params.h"
#include "core/sched/admission.h"
#include "core/sched/engine.h"
#include "core/text/text_stream.h"

namespace pulse {

using Clock = std::chrono::steady_clock;

struct Request {
  // `tokenizer` (may be null) must outlive the request.
  Request(RequestId id, std::vector<int32_t> prompt, const SamplingParams& params, TokenSink sink,
          int32_t max_context, const Tokenizer* tokenizer, Clock::time_point now);

  int32_t generated() const { return static_cast<int32_t>(tokens.size()) - prompt_tokens; }
  // Tokens fed to the model but not yet in the KV cache.
  int32_t uncomputed() const { return static_cast<int32_t>(tokens.size()) - computed; }
  bool decoding() const { return generated() > 0; }
  // KV tokens of the worst case: every token but the last one generated.
  int32_t max_kv_tokens() const { return max_total_tokens - 1; }
  // Why the request ends after its newest token, or kNone. `eos_ids` are the model's.
  FinishReason FinishAfterToken(const std::vector<int32_t>& eos_ids) const;
  RequestSnapshot Snapshot(Clock::time_point now) const;

  const RequestId id;
  std::vector<int32_t> tokens;  // the prompt, then the generated tokens
  const int32_t prompt_tokens;
  const int32_t max_total_tokens;  // min(prompt + max_tokens, max_context)
  const SamplingParams params;
  Sampler sampler;
  // Shared so that a delivery in flight keeps it alive when the request is released.
  const std::shared_ptr<const TokenSink> sink;  // null without a sink
  std::optional<TextStream> text_stream;        // with a tokenizer
  std::string text;                             // what the events carried so far

  RequestState state = RequestState::kQueued;
  FinishReason reason = FinishReason::kNone;
  absl::Status error;
  int32_t computed = 0;              // tokens whose KV is cached
  std::optional<BlockTable> blocks;  // while running, when not offloaded
  // Offloaded requests: how decode steps select, and (while running) the blocks in both tiers
  // and the device slots the request's selection may take at once.
  std::optional<SelectionOptions> offload;
  // The engine chooses whether it runs offloaded (with `offload`) or resident (admission.h); set
  // at Submit, and `offload` is cleared when it is admitted resident.
  bool placed_by_engine = false;
  // Of a request the engine places: the selection it decodes with while offloaded (`offload`
  // holds it only then), and whether it was demoted and promoted yet (once each at most, so
  // that placement never thrashes).
  std::optional<SelectionOptions> engine_selection;
  bool demoted = false;
  bool promoted = false;
  // Its recall a step while offloaded.
  RequestRecall recall;
  std::optional<OffloadedBlockTable> offloaded_blocks;
  int32_t slot_blocks = 0;
  // Its prompt is prefilled staged (no block resident: the dense pool could not hold it), until
  // its resident set is recalled before its first decode step.
  bool staged = false;
  // With prefix caching (OffloadConfig::prefix_cache): its full prompt blocks' keys, made once
  // when first looked up, and whether those blocks are named in the host tier's cache yet.
  std::vector<BlockKey> prompt_keys;
  bool prompt_cached = false;
  // In the batch of the step in flight: its blocks stay with it until the step ends, even when
  // it is cancelled meanwhile.
  bool in_step = false;

  Clock::time_point submitted;
  std::optional<Clock::time_point> scheduled;  // first scheduled step
  std::optional<Clock::time_point> first_token;
  std::optional<Clock::time_point> last_token;
  std::optional<Clock::time_point> finished;
};

}  // namespace pulse
