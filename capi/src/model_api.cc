// The pulse_model_* entry points.
#include <memory>
#include <string>

#include "capi/src/guard.h"
#include "capi/src/handles.h"
#include "capi/src/model_loading.h"
#include "capi/src/params.h"
#include "capi/src/versioned_struct.h"
#include "core/model/expected_tensors.h"

using pulse::capi::ErrorSubject;
using pulse::capi::Guard;

extern "C" {

pulse_status pulse_model_params_init(pulse_model_params* params, size_t struct_size) {
  return Guard("pulse_model_params_init", [&] {
    return pulse::capi::InitVersioned(params, struct_size, pulse::capi::DefaultModelParams());
  });
}

pulse_status pulse_model_load(const char* path, const pulse_model_params* params,
                              pulse_model** out_model) {
  constexpr absl::string_view kFunction = "pulse_model_load";
  if (out_model == nullptr) {
    return pulse::capi::Fail(PULSE_INVALID_ARGUMENT, kFunction, "out_model is NULL");
  }
  *out_model = nullptr;
  pulse::capi::ModelLoadPlan plan;
  const pulse_status checked = Guard(kFunction, [&]() -> absl::Status {
    if (path == nullptr) return absl::InvalidArgumentError("path is NULL");
    PULSE_ASSIGN_OR_RETURN(const pulse_model_params complete,
                           pulse::capi::ReadVersioned(params, pulse::capi::DefaultModelParams()));
    PULSE_ASSIGN_OR_RETURN(plan, pulse::capi::PlanModelLoad(complete));
    return absl::OkStatus();
  });
  if (checked != PULSE_OK) return checked;
  std::unique_ptr<pulse::TensorSource> source;
  const pulse_status opened = Guard(
      kFunction,
      [&]() -> absl::Status {
        PULSE_ASSIGN_OR_RETURN(source, pulse::capi::OpenModelSource(path, plan));
        return absl::OkStatus();
      },
      ErrorSubject::kModelFile);
  if (opened != PULSE_OK) return opened;
  const pulse_status shards =
      Guard(kFunction, [&] { return pulse::capi::CheckShards(source->config(), plan); });
  if (shards != PULSE_OK) return shards;
  return Guard(
      kFunction,
      [&]() -> absl::Status {
        PULSE_ASSIGN_OR_RETURN(std::unique_ptr<pulse_model> model,
                               pulse::capi::LoadModel(path, *source, plan));
        *out_model = model.release();
        return absl::OkStatus();
      },
      ErrorSubject::kModelFile);
}

pulse_model* pulse_model_retain(pulse_model* model) {
  if (model != nullptr) model->references.fetch_add(1, std::memory_order_relaxed);
  return model;
}

void pulse_model_free(pulse_model* model) {
  if (model == nullptr) return;
  if (model->references.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::unique_ptr<pulse_model> last(model);
  }
}

pulse_status pulse_model_info_get(const pulse_model* model, pulse_model_info* info) {
  return Guard("pulse_model_info_get", [&]() -> absl::Status {
    if (model == nullptr) return absl::InvalidArgumentError("model is NULL");
    PULSE_RETURN_IF_ERROR(pulse::capi::CheckOutput(info));
    const pulse::ModelConfig& config = model->model.shards.front()->config();
    pulse_model_info value{};
    value.struct_size = sizeof(value);
    value.num_layers = config.num_layers;
    value.num_heads = config.num_heads;
    value.num_kv_heads = config.num_kv_heads;
    value.head_dim = config.head_dim;
    value.hidden_size = config.hidden_size;
    value.intermediate_size = config.intermediate_size;
    value.vocab_size = config.vocab_size;
    value.context_length = config.max_position;
    value.tie_word_embeddings = config.tie_word_embeddings ? 1 : 0;
    value.parameter_count = pulse::ParameterCount(config);
    value.architecture = model->architecture.c_str();
    value.format = model->format.c_str();
    value.stored_type = model->stored_type.c_str();
    value.weight_type = model->weight_type.c_str();
    value.backend = model->backend.c_str();
    value.bos_token = model->tokenizer != nullptr ? model->tokenizer->bos_id() : -1;
    value.eos_token = model->tokenizer != nullptr ? model->tokenizer->eos_id() : -1;
    value.tokenizer = model->tokenizer_name.c_str();
    value.chat_template = model->chat_template_family.c_str();
    value.tensor_parallel_size = static_cast<int32_t>(model->model.shards.size());
    pulse::capi::WriteVersioned(value, info);
    return absl::OkStatus();
  });
}

}  // extern "C"
