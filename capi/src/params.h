// Conversions between the ABI's structs and enums and the core's options, states and reasons.
// The ABI's defaults are the core's defaults, taken from the core's structs.
#pragma once

#include "absl/status/statusor.h"
#include "core/sample/sampling_params.h"
#include "core/sched/engine.h"
#include "pulseinfer/pulseinfer.h"

namespace pulse::capi {

pulse_model_params DefaultModelParams();

pulse_engine_params DefaultEngineParams();
absl::StatusOr<EngineOptions> ToEngineOptions(const pulse_engine_params& params);

pulse_sampling_params DefaultSamplingParams();
// InvalidArgument for a stop-token or stop-string array that is NULL but counted (or a NULL
// string); the values are checked by the engine against the model.
absl::StatusOr<SamplingParams> ToSamplingParams(const pulse_sampling_params& params);
// The request's offloading fields; InvalidArgument naming a bad one.
absl::StatusOr<RequestOffload> ToRequestOffload(const pulse_sampling_params& params);

pulse_request_state ToPulseState(RequestState state);
pulse_finish_reason ToPulseFinishReason(FinishReason reason);

}  // namespace pulse::capi
