// pulse_model_load behind the ABI, in two parts so that each error is reported against what
// caused it: PlanModelLoad checks the caller's parameters and creates the backend;
// LoadModel opens the weight source (a file, a directory, or seeded random weights from a
// config.json), uploads the model and loads its tokenizer and chat template, and its errors
// describe the model file.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "capi/src/handles.h"
#include "core/backend/backend.h"

namespace pulse::capi {

struct ModelLoadPlan {
  std::shared_ptr<Backend> backend;
  DType weight_type = DType::kF32;
  bool keep_blocks = false;  // "quantized": matrices stay in the file's blocks where computed on
  bool random_weights = false;
  uint64_t random_seed = 0;
};

// `params` is complete (read through ReadVersioned).
absl::StatusOr<ModelLoadPlan> PlanModelLoad(const pulse_model_params& params);

absl::StatusOr<std::unique_ptr<pulse_model>> LoadModel(const std::string& path,
                                                       const ModelLoadPlan& plan);

}  // namespace pulse::capi
