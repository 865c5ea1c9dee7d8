// pulse_model_load behind the ABI, in parts so that each error is reported against what caused
// it: PlanModelLoad checks the caller's parameters and creates the backends (one a rank);
// OpenModelSource opens the weight source (a file, a directory, or seeded random weights from a
// config.json); CheckShards checks the ranks against the model's config (the caller's error);
// LoadModel uploads the model's shards and loads its tokenizer and chat template, and its errors
// describe the model file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "capi/src/handles.h"
#include "core/backend/backend.h"
#include "core/format/config.h"
#include "core/model/tensor_source.h"

namespace pulse::capi {

struct ModelLoadPlan {
  std::vector<std::shared_ptr<Backend>> backends;  // rank r's at r
  DType weight_type = DType::kF32;
  bool keep_blocks = false;  // "quantized": matrices stay in the file's blocks where computed on
  bool random_weights = false;
  uint64_t random_seed = 0;
};

// `params` is complete (read through ReadVersioned).
absl::StatusOr<ModelLoadPlan> PlanModelLoad(const pulse_model_params& params);

absl::StatusOr<std::unique_ptr<TensorSource>> OpenModelSource(const std::string& path,
                                                              const ModelLoadPlan& plan);

// InvalidArgument unless the plan's ranks divide what Model::Load splits.
absl::Status CheckShards(const ModelConfig& config, const ModelLoadPlan& plan);

absl::StatusOr<std::unique_ptr<pulse_model>> LoadModel(const std::string& path,
                                                       const TensorSource& source,
                                                       const ModelLoadPlan& plan);

}  // namespace pulse::capi
