// The pulse_engine_* entry points.
#include <memory>

#include "absl/strings/str_cat.h"
#include "capi/src/guard.h"
#include "capi/src/handles.h"
#include "capi/src/params.h"
#include "capi/src/versioned_struct.h"

using pulse::capi::Guard;

namespace {

absl::StatusOr<pulse::StepReport> StepOnce(pulse_engine* engine) {
  if (engine == nullptr) return absl::InvalidArgumentError("engine is NULL");
  return engine->engine->Step();
}

}  // namespace

extern "C" {

pulse_status pulse_engine_params_init(pulse_engine_params* params, size_t struct_size) {
  return Guard("pulse_engine_params_init", [&] {
    return pulse::capi::InitVersioned(params, struct_size, pulse::capi::DefaultEngineParams());
  });
}

pulse_status pulse_engine_create(const pulse_model* model, const pulse_engine_params* params,
                                 pulse_engine** out_engine) {
  return Guard("pulse_engine_create", [&]() -> absl::Status {
    if (out_engine == nullptr) return absl::InvalidArgumentError("out_engine is NULL");
    *out_engine = nullptr;
    if (model == nullptr) return absl::InvalidArgumentError("model is NULL");
    PULSE_ASSIGN_OR_RETURN(const pulse_engine_params complete,
                           pulse::capi::ReadVersioned(params, pulse::capi::DefaultEngineParams()));
    auto handle = std::make_unique<pulse_engine>();
    PULSE_ASSIGN_OR_RETURN(const pulse::EngineOptions options,
                           pulse::capi::ToEngineOptions(complete));
    PULSE_ASSIGN_OR_RETURN(handle->engine,
                           pulse::Engine::Create(model->model, options, model->tokenizer));
    handle->chat_template = model->chat_template;
    *out_engine = handle.release();
    return absl::OkStatus();
  });
}

void pulse_engine_free(pulse_engine* engine) { std::unique_ptr<pulse_engine> owned(engine); }

pulse_status pulse_engine_step(pulse_engine* engine, pulse_step_report* report) {
  return Guard("pulse_engine_step", [&]() -> absl::Status {
    if (report != nullptr) PULSE_RETURN_IF_ERROR(pulse::capi::CheckOutput(report));
    PULSE_ASSIGN_OR_RETURN(const pulse::StepReport step, StepOnce(engine));
    if (report != nullptr) {
      pulse_step_report value{};
      value.struct_size = sizeof(value);
      value.scheduled = step.scheduled;
      value.prefill_tokens = step.prefill_tokens;
      value.decode_tokens = step.decode_tokens;
      value.pending = step.pending;
      pulse::capi::WriteVersioned(value, report);
    }
    return absl::OkStatus();
  });
}

pulse_status pulse_engine_run(pulse_engine* engine) {
  return Guard("pulse_engine_run", [&]() -> absl::Status {
    while (true) {
      PULSE_ASSIGN_OR_RETURN(const pulse::StepReport step, StepOnce(engine));
      if (step.pending == 0) return absl::OkStatus();
      if (step.scheduled == 0) {
        return absl::InternalError(
            absl::StrCat("a step scheduled nothing while ", step.pending, " requests are pending"));
      }
    }
  });
}

pulse_status pulse_engine_stats_get(pulse_engine* engine, pulse_engine_stats* stats) {
  return Guard("pulse_engine_stats_get", [&]() -> absl::Status {
    if (engine == nullptr) return absl::InvalidArgumentError("engine is NULL");
    PULSE_RETURN_IF_ERROR(pulse::capi::CheckOutput(stats));
    const pulse::EngineStats totals = engine->engine->stats();
    pulse_engine_stats value{};
    value.struct_size = sizeof(value);
    value.steps = totals.steps;
    value.prefill_tokens = totals.prefill_tokens;
    value.decode_tokens = totals.decode_tokens;
    value.generated_tokens = totals.generated_tokens;
    value.finished_requests = totals.finished_requests;
    value.queued = totals.queued;
    value.running = totals.running;
    value.kv_blocks = totals.kv_blocks;
    value.kv_blocks_in_use = totals.kv_blocks_in_use;
    value.sparse_selections = totals.sparse.selections;
    value.sparse_candidate_blocks = totals.sparse.candidate_blocks;
    value.sparse_picked_blocks = totals.sparse.picked_blocks;
    value.sparse_reused_blocks = totals.sparse.reused_blocks;
    value.sparse_attended_tokens = totals.sparse.attended_tokens;
    value.sparse_context_tokens = totals.sparse.context_tokens;
    value.host_blocks = totals.host_blocks;
    value.host_blocks_in_use = totals.host_blocks_in_use;
    value.slot_blocks = totals.slot_blocks;
    value.slot_blocks_in_use = totals.slot_blocks_in_use;
    value.recall_bytes = totals.offload.recall_bytes;
    value.recall_transfers = totals.offload.recall_chunks;
    value.recall_plans = totals.offload.recall_plans;
    value.recall_ms = totals.offload.recall_seconds * 1e3;
    value.writeback_bytes = totals.offload.writeback_bytes;
    value.slot_hits = totals.offload.cache.hits;
    value.slot_misses = totals.offload.cache.misses;
    value.slot_evictions = totals.offload.cache.evictions;
    value.selection_ms = totals.sparse.planning_seconds * 1e3;
    value.host_waits = totals.host_waits;
    value.admitted_resident = totals.admission.resident;
    value.admitted_offloaded = totals.admission.offloaded;
    value.admission_io_waits = totals.admission.io_waits;
    value.link_gb_s = totals.admission.link_bytes_per_second * 1e-9;
    value.recall_mb_per_row = totals.admission.recall_bytes_per_row * 1e-6;
    value.step_compute_ms = totals.admission.compute_ms;
    value.predicted_recall_ms = totals.admission.predicted_recall_ms;
    value.running_offloaded = totals.admission.offloaded_running;
    value.kv_memory_bytes = totals.kv_memory_bytes;
    value.split_steps = totals.micro_batches.split_steps;
    value.probe_steps = totals.micro_batches.probe_steps;
    value.micro_batches = totals.micro_batches.last;
    value.demoted_requests = totals.admission.demoted;
    value.promoted_requests = totals.admission.promoted;
    value.retried_steps = totals.retried_steps;
    value.staged_requests = totals.admission.staged;
    value.staged_recall_bytes = totals.offload.staged.recall_bytes;
    value.lowered_budgets = totals.admission.lowered_budgets;
    value.prefix_hits = totals.admission.prefix_hits;
    value.prefix_hit_tokens = totals.admission.prefix_hit_tokens;
    value.host_blocks_cached = totals.host_blocks_cached;
    pulse::capi::WriteVersioned(value, stats);
    return absl::OkStatus();
  });
}

}  // extern "C"
