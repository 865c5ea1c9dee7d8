// OpenRandomSource: seeded random weights at a config's real shapes, for benchmarks and
// cross-checks. Every value is a pure function of (seed, tensor name, index), so tensors can be
// generated in any order, or in parallel, with the same result.
#include <cmath>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/base/thread_pool.h"
#include "core/model/expected_tensors.h"
#include "core/model/tensor_source.h"

namespace pulse {
namespace {

// splitmix64's finalizer: a bijective mix of a 64-bit counter.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// FNV-1a: a hash of the tensor name that is the same in every process (absl::Hash is not).
uint64_t NameHash(std::string_view name) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (const char c : name) hash = (hash ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return hash;
}

// Values are center + half_width * u with u uniform in [-1, 1), whose std is half_width / sqrt(3).
struct Distribution {
  float center = 0.0f;
  float half_width = 0.0f;
};

Distribution DistributionFor(const TensorInfo& tensor) {
  const std::string_view name = tensor.name;
  const auto uniform_with_std = [](double std) { return static_cast<float>(std * std::sqrt(3.0)); };
  if (name.ends_with("norm.weight")) return {1.0f, 0.1f};
  if (name.ends_with(".bias")) return {0.0f, uniform_with_std(0.1)};
  if (name == "model.embed_tokens.weight") return {0.0f, uniform_with_std(1.0)};
  // Linear layers [out, in]: std 1/sqrt(in) keeps activations of order one.
  return {0.0f, uniform_with_std(1.0 / std::sqrt(static_cast<double>(tensor.shape.back())))};
}

class RandomSource final : public TensorSource {
 public:
  RandomSource(const ModelConfig& config, uint64_t seed)
      : config_(config), seed_(seed), tensors_(ExpectedTensors(config)) {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      tensors_[i].stored_type = "random";
      index_.emplace(tensors_[i].name, i);
    }
    metadata_.emplace("random.seed", absl::StrFormat("%d", seed));
  }

  std::string_view format() const override { return "random"; }
  const ModelConfig& config() const override { return config_; }
  std::span<const TensorInfo> tensors() const override { return tensors_; }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }

  absl::Status Read(std::string_view name, std::span<float> out) const override {
    const auto it = index_.find(std::string(name));
    if (it == index_.end()) {
      return absl::NotFoundError(absl::StrFormat("random source has no tensor '%s'", name));
    }
    const TensorInfo& tensor = tensors_[it->second];
    if (out.size() != static_cast<size_t>(tensor.elements())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("reading '%s': output holds %d values, the tensor has %d", name,
                          out.size(), tensor.elements()));
    }
    const Distribution dist = DistributionFor(tensor);
    const uint64_t stream = Mix(seed_ ^ NameHash(name));
    const float scale = dist.half_width * 0x1p-23f;  // 24 random bits onto [-1, 1)
    // Each value depends on its index only, so the split across threads cannot change it.
    pool_.ParallelFor(static_cast<int64_t>(out.size()), 1 << 20, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const auto bits = static_cast<int32_t>(
            Mix(stream + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) >> 40);
        out[i] = dist.center + static_cast<float>(bits - (1 << 23)) * scale;
      }
    });
    return absl::OkStatus();
  }

 private:
  ModelConfig config_;
  uint64_t seed_;
  std::vector<TensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> index_;
  mutable ThreadPool pool_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TensorSource>> OpenRandomSource(const ModelConfig& config,
                                                               uint64_t seed) {
  PULSE_RETURN_IF_ERROR(config.Validate());
  return std::make_unique<RandomSource>(config, seed);
}

}  // namespace pulse
