#include "capi/src/model_loading.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/backend/cpu/cpu_backend.h"
#include "core/backend/cpu/thread_communicator.h"
#include "core/backend/cuda/cuda_backend.h"
#include "core/base/mapped_file.h"
#include "core/format/gguf_reader.h"
#include "core/format/hf_config.h"
#include "core/model/tensor_source.h"

namespace pulse::capi {
namespace {

enum class BackendKind { kCpu, kCuda };

// The most ranks a model may be split over.
constexpr int32_t kMaxRanks = 64;

absl::string_view OrAuto(const char* text) { return text == nullptr ? "auto" : text; }

absl::StatusOr<BackendKind> ParseBackend(absl::string_view name) {
  if (name == "auto") return CudaDeviceCount() > 0 ? BackendKind::kCuda : BackendKind::kCpu;
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("pulse_model_params.backend is '", name, "'; expected auto, cpu or cuda"));
}

// Sets the plan's weight type (and whether matrices stay in their blocks) from `name`.
absl::Status ParseWeightType(absl::string_view name, BackendKind backend, ModelLoadPlan& plan) {
  const DType wide = backend == BackendKind::kCpu ? DType::kF32 : DType::kBF16;
  if (name == "auto") {
    plan.weight_type = wide;
    plan.keep_blocks = backend == BackendKind::kCpu;
  } else if (name == "f32") {
    plan.weight_type = DType::kF32;
  } else if (name == "bf16") {
    plan.weight_type = DType::kBF16;
  } else if (name == "quantized") {
    plan.weight_type = wide;
    plan.keep_blocks = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("pulse_model_params.weight_type is '", name,
                                                   "'; expected auto, f32, bf16 or quantized"));
  }
  return absl::OkStatus();
}

// `path` names a config.json or a directory holding one.
absl::StatusOr<std::unique_ptr<TensorSource>> OpenRandom(const std::string& path, uint64_t seed) {
  std::error_code error;
  const std::string config_path =
      std::filesystem::is_directory(path, error) ? path + "/config.json" : path;
  PULSE_ASSIGN_OR_RETURN(const MappedFile file, MappedFile::Open(config_path));
  const std::string_view text(reinterpret_cast<const char*>(file.bytes().data()),
                              file.bytes().size());
  PULSE_ASSIGN_OR_RETURN(const ModelConfig config, ParseHfConfig(text));
  return OpenRandomSource(config, seed);
}

// The directory a Hugging Face path names: itself, or the folder of a file in it.
std::string DirectoryOf(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) return path;
  return std::filesystem::path(path).parent_path().string();
}

// The model's tokenizer: from the GGUF's metadata, or tokenizer.json beside a Hugging Face
// model (also beside a random model's config.json). Null when the model has none.
absl::StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizer(const std::string& path,
                                                               std::string_view format) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer;
  if (format == "gguf") {
    PULSE_ASSIGN_OR_RETURN(const GgufFile gguf, GgufFile::Open(path));
    tokenizer = Tokenizer::FromGguf(gguf);
  } else {
    tokenizer = Tokenizer::FromHfDirectory(DirectoryOf(path));
  }
  if (absl::IsNotFound(tokenizer.status())) return nullptr;
  // A tokenizer.json of a kind this library does not read (Unigram, WordPiece...): the weights
  // still load, without text functions; a corrupt one is an error of the model.
  if (format != "gguf" && absl::IsUnimplemented(tokenizer.status())) return nullptr;
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("the tokenizer: ", tokenizer.status().message()));
  }
  return std::shared_ptr<const Tokenizer>(std::move(*tokenizer));
}

// The text of a special token for the chat template's bos_token / eos_token ("" for none).
std::string_view SpecialText(const Tokenizer& tokenizer, int32_t id) {
  return id < 0 ? std::string_view() : tokenizer.TokenPiece(id);
}

void AttachTokenizer(std::shared_ptr<const Tokenizer> tokenizer, pulse_model& handle) {
  if (tokenizer == nullptr) return;
  handle.tokenizer_name = std::string(tokenizer->model_name());
  const std::string_view source = tokenizer->chat_template();
  handle.chat_template =
      ChatTemplate::Recognize(source, SpecialText(*tokenizer, tokenizer->bos_id()),
                              SpecialText(*tokenizer, tokenizer->eos_id()));
  if (handle.chat_template.ok()) {
    handle.chat_template_family = std::string((*handle.chat_template)->family());
  }
  handle.tokenizer = std::move(tokenizer);
}

}  // namespace

absl::StatusOr<ModelLoadPlan> PlanModelLoad(const pulse_model_params& params) {
  if (params.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pulse_model_params.threads is ", params.threads, "; expected >= 0"));
  }
  if (params.tensor_parallel_size < 0 || params.tensor_parallel_size > kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("pulse_model_params.tensor_parallel_size is ",
                                                   params.tensor_parallel_size, "; expected 0 to ",
                                                   kMaxRanks));
  }
  const auto ranks = static_cast<int32_t>(std::max<int64_t>(params.tensor_parallel_size, 1));
  PULSE_ASSIGN_OR_RETURN(const BackendKind backend, ParseBackend(OrAuto(params.backend)));
  ModelLoadPlan plan;
  PULSE_RETURN_IF_ERROR(ParseWeightType(OrAuto(params.weight_type), backend, plan));
  if (backend == BackendKind::kCuda) {
    if (ranks > 1) {
      return absl::UnimplementedError(
          "pulse_model_params.tensor_parallel_size > 1 on CUDA: this build has no communicator "
          "between GPUs (tensor parallelism runs on the CPU backend)");
    }
    CudaBackendOptions options;
    options.memory_limit_bytes = static_cast<size_t>(params.memory_limit_bytes);
    PULSE_ASSIGN_OR_RETURN(std::shared_ptr<Backend> cuda, CreateCudaBackend(options));
    plan.backends.push_back(std::move(cuda));
  } else {
    CpuBackendOptions options;
    const int32_t threads = params.threads > 0
                                ? params.threads
                                : static_cast<int32_t>(std::thread::hardware_concurrency());
    options.threads = std::max(1, threads / ranks);
    options.memory_limit_bytes = static_cast<size_t>(params.memory_limit_bytes);
    // The environment forces the kernels' instruction-set level (docs/design/cpu-backend.md).
    if (const char* name = std::getenv("PULSEINFER_CPU_LEVEL"); name != nullptr) {
      const absl::StatusOr<cpu::CpuLevel> level = cpu::ParseCpuLevel(name);
      if (!level.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("PULSEINFER_CPU_LEVEL: ", level.status().message()));
      }
      options.kernel_level = *level;
    }
    for (int32_t r = 0; r < ranks; ++r) {
      PULSE_ASSIGN_OR_RETURN(std::shared_ptr<Backend> cpu, CreateCpuBackend(options));
      plan.backends.push_back(std::move(cpu));
    }
  }
  plan.random_weights = params.random_weights != 0;
  plan.random_seed = params.random_seed;
  return plan;
}

absl::StatusOr<std::unique_ptr<TensorSource>> OpenModelSource(const std::string& path,
                                                              const ModelLoadPlan& plan) {
  if (plan.random_weights) return OpenRandom(path, plan.random_seed);
  return OpenTensorSource(path);
}

absl::Status CheckShards(const ModelConfig& config, const ModelLoadPlan& plan) {
  const absl::StatusOr<ShardDims> dims =
      ShardDimsOf(config, {.rank = 0, .size = static_cast<int32_t>(plan.backends.size())});
  if (!dims.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pulse_model_params.tensor_parallel_size: ", dims.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<pulse_model>> LoadModel(const std::string& path,
                                                       const TensorSource& source,
                                                       const ModelLoadPlan& plan) {
  const auto ranks = static_cast<int32_t>(plan.backends.size());
  ShardedModel sharded;
  for (int32_t r = 0; r < ranks; ++r) {
    ModelLoadOptions options;
    options.weight_type = plan.weight_type;
    options.keep_blocks = plan.keep_blocks;
    options.shard = {.rank = r, .size = ranks};
    PULSE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> shard,
                           Model::Load(plan.backends[static_cast<size_t>(r)], source, options));
    sharded.shards.push_back(std::move(shard));
  }
  // Only the CPU backend has ranks past one (PlanModelLoad).
  if (ranks > 1) sharded.connect = [ranks] { return CreateThreadCommunicators(ranks); };
  const std::shared_ptr<const Model>& model = sharded.shards.front();

  auto handle = std::make_unique<pulse_model>();
  handle->architecture = std::string(ArchitectureName(model->config().architecture));
  handle->format = std::string(model->format());
  handle->stored_type = std::string(model->stored_type());
  handle->weight_type =
      model->weights_in_blocks() ? "quantized" : std::string(DTypeName(model->weight_type()));
  handle->backend = std::string(model->backend().name());
  PULSE_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer,
                         LoadTokenizer(path, handle->format));
  if (tokenizer != nullptr && tokenizer->vocab_size() > model->config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", tokenizer->vocab_size(),
                                                   " tokens, more than the model's vocabulary of ",
                                                   model->config().vocab_size));
  }
  AttachTokenizer(std::move(tokenizer), *handle);
  handle->model = std::move(sharded);
  return handle;
}

}  // namespace pulse::capi
