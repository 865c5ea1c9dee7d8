#include "core/sched/step_completion.h"

#include <utility>

#include "core/text/text_stream.h"

namespace pulse {
namespace {

// A token the backend drew, or why it could not draw one.
absl::StatusOr<int32_t> BackendToken(int32_t token) {
  if (token >= 0) return token;
  // As UnsampleableLogits, without the logit's index: the logits stayed on the backend.
  return absl::DataLossError(
      "the model computed a logit that is nan or +inf, or none that is finite: cannot sample");
}

// Streams the request's new token into its text: returns the piece the token's event carries,
// and turns `reason` into kStopString when a stop string ends the text. A finishing request's
// last piece includes the text held back.
std::string AppendText(Request& request, int32_t token, FinishReason& reason) {
  if (!request.text_stream) return {};
  TextStream::Piece piece = request.text_stream->Add(token);
  if (piece.stopped) {
    reason = FinishReason::kStopString;
  } else if (reason != FinishReason::kNone) {
    piece.text += request.text_stream->Finish();
  }
  request.text += piece.text;
  return std::move(piece.text);
}

}  // namespace

void RecordFailure(Request& request, absl::Status error, std::vector<Delivery>& deliveries) {
  request.error = std::move(error);
  if (request.sink != nullptr) {
    deliveries.push_back({request.sink,
                          {.id = request.id,
                           .token = -1,
                           .index = request.generated(),
                           .finished = true,
                           .reason = FinishReason::kError,
                           .logits = {}},
                          {}});
  }
}

StepCompletion CompleteStep(std::span<const ScheduledSequence> work, const ForwardResult& forward,
                            const ModelConfig& config, Clock::time_point now,
                            std::vector<Delivery>& deliveries) {
  const size_t vocab = static_cast<size_t>(config.vocab_size);
  StepCompletion completion;
  size_t row = 0;
  for (const ScheduledSequence& sequence : work) {
    Request& request = *sequence.request;
    request.in_step = false;
    if (forward.status.ok()) {
      (sequence.decode ? completion.decode_tokens : completion.prefill_tokens) += sequence.count;
    }
    const size_t sample_row = sequence.sample ? row++ : 0;
    const std::span<const float> row_logits =
        sequence.sample && !forward.logits.empty()
            ? forward.logits.subspan(vocab * sample_row, vocab)
            : std::span<const float>();
    if (request.state == RequestState::kFinished) {
      // Cancelled while the step was in flight: nothing is sampled.
      completion.ends.push_back({&request, std::nullopt});
      continue;
    }
    if (!forward.status.ok()) {
      RecordFailure(request, forward.status, deliveries);
      completion.ends.push_back({&request, FinishReason::kError});
      continue;
    }
    request.computed += sequence.count;
    if (!sequence.sample) continue;
    const absl::StatusOr<int32_t> token = forward.logits_to_host
                                              ? request.sampler.Sample(row_logits, request.tokens)
                                              : BackendToken(forward.tokens[sample_row]);
    if (!token.ok()) {
      RecordFailure(request, token.status(), deliveries);
      completion.ends.push_back({&request, FinishReason::kError});
      continue;
    }
    request.tokens.push_back(*token);
    ++completion.generated_tokens;
    if (!request.first_token) request.first_token = now;
    request.last_token = now;
    FinishReason reason = request.FinishAfterToken(config.eos_token_ids);
    std::string text = AppendText(request, *token, reason);
    if (reason != FinishReason::kNone) completion.ends.push_back({&request, reason});
    if (request.sink != nullptr) {
      deliveries.push_back({request.sink,
                            {.id = request.id,
                             .token = *token,
                             .index = request.generated() - 1,
                             .finished = reason != FinishReason::kNone,
                             .reason = reason,
                             .logits = row_logits},
                            std::move(text)});
    }
  }
  return completion;
}

}  // namespace pulse
