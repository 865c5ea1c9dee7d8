//! Figures of a request (`pulse_request_stats`) and of an engine (`pulse_engine_stats`).

use std::ffi::CStr;
use std::fmt;
use std::time::Duration;

use pulseinfer_sys as sys;

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestState {
    /// Waiting for a batch slot or KV capacity (a wait, not an error).
    Queued,
    /// In the batch: prefilling or decoding.
    Running,
    /// Done; see its finish reason.
    Finished,
    /// A state this binding does not know (from a newer library).
    Unknown(i32),
}

impl RequestState {
    fn from_raw(state: sys::pulse_request_state) -> Self {
        match state as sys::pulse_request_state_code {
            sys::PULSE_REQUEST_QUEUED => RequestState::Queued,
            sys::PULSE_REQUEST_RUNNING => RequestState::Running,
            sys::PULSE_REQUEST_FINISHED => RequestState::Finished,
            _ => RequestState::Unknown(state),
        }
    }
}

/// Why a request finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FinishReason {
    /// Generated max_tokens.
    MaxTokens,
    /// Sampled a stop or end-of-sequence token (it is in the output).
    StopToken,
    /// Reached the engine's max_context.
    Context,
    /// Cancelled.
    Cancelled,
    /// Can never fit the KV cache.
    Capacity,
    /// Failed (the generation's iterator gave the error).
    Error,
    /// Its text reached a stop string (which is not in the text).
    StopString,
    /// A reason this binding does not know (from a newer library).
    Unknown(i32),
}

impl FinishReason {
    /// None while the request is not finished.
    pub(crate) fn from_raw(reason: sys::pulse_finish_reason) -> Option<Self> {
        Some(match reason as sys::pulse_finish_reason_code {
            sys::PULSE_FINISH_NONE => return None,
            sys::PULSE_FINISH_MAX_TOKENS => FinishReason::MaxTokens,
            sys::PULSE_FINISH_STOP_TOKEN => FinishReason::StopToken,
            sys::PULSE_FINISH_CONTEXT => FinishReason::Context,
            sys::PULSE_FINISH_CANCELLED => FinishReason::Cancelled,
            sys::PULSE_FINISH_CAPACITY => FinishReason::Capacity,
            sys::PULSE_FINISH_ERROR => FinishReason::Error,
            sys::PULSE_FINISH_STOP_STRING => FinishReason::StopString,
            _ => FinishReason::Unknown(reason),
        })
    }

    fn to_raw(self) -> sys::pulse_finish_reason {
        (match self {
            FinishReason::MaxTokens => sys::PULSE_FINISH_MAX_TOKENS,
            FinishReason::StopToken => sys::PULSE_FINISH_STOP_TOKEN,
            FinishReason::Context => sys::PULSE_FINISH_CONTEXT,
            FinishReason::Cancelled => sys::PULSE_FINISH_CANCELLED,
            FinishReason::Capacity => sys::PULSE_FINISH_CAPACITY,
            FinishReason::Error => sys::PULSE_FINISH_ERROR,
            FinishReason::StopString => sys::PULSE_FINISH_STOP_STRING,
            FinishReason::Unknown(reason) => return reason,
        }) as sys::pulse_finish_reason
    }
}

impl fmt::Display for FinishReason {
    /// The library's name: "max_tokens", "stop_token"...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: pulse_finish_reason_string returns a static string, never NULL, for any code.
        let name = unsafe { CStr::from_ptr(sys::pulse_finish_reason_string(self.to_raw())) };
        f.write_str(&name.to_string_lossy())
    }
}

/// A time the library reports in milliseconds (negative ones read as zero).
fn millis(ms: f64) -> Duration {
    Duration::from_secs_f64(ms.max(0.0) / 1e3)
}

/// A request's figures, from [`Generation::stats`](crate::Generation::stats).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RequestStats {
    pub state: RequestState,
    /// None until it finishes.
    pub finish_reason: Option<FinishReason>,
    pub prompt_tokens: i32,
    pub generated_tokens: i32,
    /// Submit to the first step that scheduled it.
    pub queue_time: Duration,
    /// Submit to the first generated token.
    pub time_to_first_token: Duration,
    /// The mean time between generated tokens after the first.
    pub time_per_output_token: Duration,
    /// Submit to finish (or to now).
    pub total_time: Duration,
}

impl RequestStats {
    pub(crate) fn from_raw(stats: &sys::pulse_request_stats) -> Self {
        RequestStats {
            state: RequestState::from_raw(stats.state),
            finish_reason: FinishReason::from_raw(stats.finish_reason),
            prompt_tokens: stats.prompt_tokens,
            generated_tokens: stats.generated_tokens,
            queue_time: millis(stats.queue_ms),
            time_to_first_token: millis(stats.ttft_ms),
            time_per_output_token: millis(stats.tpot_ms),
            total_time: millis(stats.total_ms),
        }
    }
}

/// An engine's totals since it was created, and its state now, from
/// [`Engine::stats`](crate::Engine::stats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Steps that ran a forward pass.
    pub steps: i64,
    /// Prompt tokens computed.
    pub prefill_tokens: i64,
    /// Generated tokens fed back into the model.
    pub decode_tokens: i64,
    /// Tokens sampled.
    pub generated_tokens: i64,
    /// Requests that finished, for any reason.
    pub finished_requests: i64,
    /// Requests waiting now.
    pub queued: i32,
    /// Requests in the batch now.
    pub running: i32,
    /// Blocks of the KV cache.
    pub kv_blocks: i32,
    /// Blocks allocated or reserved by running requests.
    pub kv_blocks_in_use: i32,
    /// Sparse decode attention: (request, layer, step, block set) selections made.
    pub sparse_selections: i64,
    /// Blocks scored by those selections.
    pub sparse_candidate_blocks: i64,
    /// Of them, selected.
    pub sparse_picked_blocks: i64,
    /// Of those, also selected by the same set the step before.
    pub sparse_reused_blocks: i64,
    /// Tokens the sparse rows attended to.
    pub sparse_attended_tokens: i64,
    /// Tokens they would have attended to densely.
    pub sparse_context_tokens: i64,
    /// Offloaded KV: blocks of the host tier.
    pub host_blocks: i32,
    /// Host blocks reserved by running requests.
    pub host_blocks_in_use: i32,
    /// Device-tier slots (in blocks).
    pub slot_blocks: i32,
    /// Slots reserved by running requests' budgets.
    pub slot_blocks_in_use: i32,
    /// Bytes recalled from the host tier to the device.
    pub recall_bytes: i64,
    /// Contiguous chunks recalled (a block, or a head's K or V).
    pub recall_transfers: i64,
    /// (step, layer) recalls that moved something.
    pub recall_plans: i64,
    /// The copy engine's time on the recalls.
    pub recall_time: Duration,
    /// Bytes written back from the device to the host tier, each full block once a layer.
    pub writeback_bytes: i64,
    /// Selected blocks found in a slot.
    pub slot_hits: i64,
    /// Selected blocks recalled.
    pub slot_misses: i64,
    /// Cached blocks a recall displaced.
    pub slot_evictions: i64,
    /// Host time planning the steps' sparse selection (it runs on the device).
    pub selection_time: Duration,
    /// Host waits for the device inside steps besides reading their tokens: 0 when the device
    /// drives every step.
    pub host_waits: i64,
    /// Requests an offloading engine admitted resident (dense).
    pub admitted_resident: i64,
    /// Requests admitted offloaded.
    pub admitted_offloaded: i64,
    /// Admissions where the head of the queue waited for recall I/O.
    pub admission_io_waits: i64,
    /// The recall link's rate as measured, in bytes a second, rounded (0 before the first
    /// offloaded decode step).
    pub link_bytes_per_second: u64,
    /// Recall bytes an offloaded row costs a step, rounded (a moving average).
    pub recall_bytes_per_row: u64,
    /// A decode step's time less the copy engine's time on its recalls (a moving average).
    pub step_compute_time: Duration,
    /// The recall time predicted for a step of the offloaded requests running now.
    pub predicted_recall_time: Duration,
    /// Offloaded requests running now.
    pub running_offloaded: i32,
    /// Device bytes of the KV: cache blocks, slots and summaries.
    pub kv_memory_bytes: i64,
    /// Decode steps run as several micro-batches (layer-wise scheduling).
    pub split_steps: i64,
    /// Eligible steps the adaptive choice ran against its preference, to measure both ways.
    pub probe_steps: i64,
    /// The last step's micro-batches.
    pub micro_batches: i32,
    /// Resident requests offloaded while running, under memory pressure (adaptive admission).
    pub demoted_requests: i64,
    /// Offloaded requests made resident again while running, when memory freed.
    pub promoted_requests: i64,
    /// Steps that failed as a whole (a failed copy, the device tier exhausted mid-step) and ran
    /// once more.
    pub retried_steps: i64,
    /// Offloaded requests whose prompt the KV cache could not hold, prefilled staged (the
    /// earlier chunks' KV read from the host tier a layer at a time).
    pub staged_requests: i64,
    /// Bytes the staged prompts' chunks recalled.
    pub staged_recall_bytes: i64,
    /// Offloaded requests admitted with a budget below the engine's
    /// ([`EngineParams::offload_min_budget_tokens`](crate::EngineParams::offload_min_budget_tokens)).
    pub lowered_budgets: i64,
    /// Offloaded requests admitted with cached blocks at the start of their prompt
    /// ([`EngineParams::offload_prefix_cache`](crate::EngineParams::offload_prefix_cache)).
    pub prefix_hits: i64,
    /// Prompt tokens those cached blocks spared prefill.
    pub prefix_hit_tokens: i64,
    /// Host-tier blocks cached now, held by running requests or not.
    pub host_blocks_cached: i32,
}

impl EngineStats {
    pub(crate) fn from_raw(stats: &sys::pulse_engine_stats) -> Self {
        EngineStats {
            steps: stats.steps,
            prefill_tokens: stats.prefill_tokens,
            decode_tokens: stats.decode_tokens,
            generated_tokens: stats.generated_tokens,
            finished_requests: stats.finished_requests,
            queued: stats.queued,
            running: stats.running,
            kv_blocks: stats.kv_blocks,
            kv_blocks_in_use: stats.kv_blocks_in_use,
            sparse_selections: stats.sparse_selections,
            sparse_candidate_blocks: stats.sparse_candidate_blocks,
            sparse_picked_blocks: stats.sparse_picked_blocks,
            sparse_reused_blocks: stats.sparse_reused_blocks,
            sparse_attended_tokens: stats.sparse_attended_tokens,
            sparse_context_tokens: stats.sparse_context_tokens,
            host_blocks: stats.host_blocks,
            host_blocks_in_use: stats.host_blocks_in_use,
            slot_blocks: stats.slot_blocks,
            slot_blocks_in_use: stats.slot_blocks_in_use,
            recall_bytes: stats.recall_bytes,
            recall_transfers: stats.recall_transfers,
            recall_plans: stats.recall_plans,
            recall_time: millis(stats.recall_ms),
            writeback_bytes: stats.writeback_bytes,
            slot_hits: stats.slot_hits,
            slot_misses: stats.slot_misses,
            slot_evictions: stats.slot_evictions,
            selection_time: millis(stats.selection_ms),
            host_waits: stats.host_waits,
            admitted_resident: stats.admitted_resident,
            admitted_offloaded: stats.admitted_offloaded,
            admission_io_waits: stats.admission_io_waits,
            link_bytes_per_second: (stats.link_gb_s * 1e9).round() as u64,
            recall_bytes_per_row: (stats.recall_mb_per_row * 1e6).round() as u64,
            step_compute_time: millis(stats.step_compute_ms),
            predicted_recall_time: millis(stats.predicted_recall_ms),
            running_offloaded: stats.running_offloaded,
            kv_memory_bytes: stats.kv_memory_bytes,
            split_steps: stats.split_steps,
            probe_steps: stats.probe_steps,
            micro_batches: stats.micro_batches,
            demoted_requests: stats.demoted_requests,
            promoted_requests: stats.promoted_requests,
            retried_steps: stats.retried_steps,
            staged_requests: stats.staged_requests,
            staged_recall_bytes: stats.staged_recall_bytes,
            lowered_budgets: stats.lowered_budgets,
            prefix_hits: stats.prefix_hits,
            prefix_hit_tokens: stats.prefix_hit_tokens,
            host_blocks_cached: stats.host_blocks_cached,
        }
    }
}
