#include "core/sched/request.h"

#include <algorithm>
#include <utility>

namespace pulse {
namespace {

double Milliseconds(Clock::duration duration) {
  return std::chrono::duration<double, std::milli>(duration).count();
}

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

Request::Request(RequestId id, std::vector<int32_t> prompt, const SamplingParams& params,
                 TokenSink sink, int32_t max_context, const Tokenizer* tokenizer,
                 Clock::time_point now)
    : id(id),
      tokens(std::move(prompt)),
      prompt_tokens(static_cast<int32_t>(tokens.size())),
      max_total_tokens(static_cast<int32_t>(
          std::min<int64_t>(int64_t{prompt_tokens} + params.max_tokens, max_context))),
      params(params),
      sampler(params),
      sink(sink ? std::make_shared<const TokenSink>(std::move(sink)) : nullptr),
      submitted(now) {
  if (tokenizer != nullptr) text_stream.emplace(*tokenizer, params.stop_strings);
}

FinishReason Request::FinishAfterToken(const std::vector<int32_t>& eos_ids) const {
  const int32_t token = tokens.back();
  if (Contains(params.stop_token_ids, token) || (!params.ignore_eos && Contains(eos_ids, token))) {
    return FinishReason::kStopToken;
  }
  if (generated() >= params.max_tokens) return FinishReason::kMaxTokens;
  if (static_cast<int32_t>(tokens.size()) >= max_total_tokens) return FinishReason::kContext;
  return FinishReason::kNone;
}

RequestSnapshot Request::Snapshot(Clock::time_point now) const {
  RequestSnapshot snapshot;
  snapshot.state = state;
  snapshot.reason = reason;
  snapshot.error = error;
  snapshot.tokens.assign(tokens.begin() + prompt_tokens, tokens.end());
  snapshot.text = text;
  RequestStats& stats = snapshot.stats;
  stats.prompt_tokens = prompt_tokens;
  stats.generated_tokens = generated();
  if (scheduled) stats.queue_ms = Milliseconds(*scheduled - submitted);
  if (first_token) stats.ttft_ms = Milliseconds(*first_token - submitted);
  if (generated() >= 2) {
    stats.tpot_ms = Milliseconds(*last_token - *first_token) / (generated() - 1);
  }
  stats.total_ms = Milliseconds(finished.value_or(now) - submitted);
  return snapshot;
}

}  // namespace pulse
