// pulse-skinny-gemm-bench: the decode GEMM kernel (core/backend/cuda/skinny_gemm.cuh) in several
// tilings and cuBLASLt, on Llama-3.1-8B's weight shapes at 1 to 8 rows, in one run. The backend
// runs the kernel where it wins here (cuda::PreferSkinnyGemm).
//
//   pulse-skinny-gemm-bench [--out FILE.jsonl] [--hbm-gb-s 4250] [--runs 200]
//
// Each kernel is timed with CUDA events around each launch, after a warm-up, and reported as the
// median over the runs against its floor (weight + x + y bytes over the HBM bandwidth). Weights
// rotate among copies totalling more than 4x the L2 cache, filled with random values. Every
// tiling's output is compared with cuBLASLt's (relative L2 error; the run fails above 1e-5).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/lt_gemm.h"
#include "core/backend/cuda/skinny_gemm.cuh"
#include "tests/tools/tool_main.h"

namespace pulse {
namespace {

constexpr std::string_view kUsage =
    "usage: pulse-skinny-gemm-bench [--out FILE.jsonl] [--hbm-gb-s 4250] [--runs 200]";
constexpr size_t kL2Bytes = size_t{60} << 20;

struct Args {
  std::string out;
  double hbm_gb_s = 4250;
  int runs = 200;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args args;
  if (argc % 2 == 0) return absl::InvalidArgumentError("a flag needs a value");
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    bool ok = true;
    if (flag == "--out") {
      args.out = value;
    } else if (flag == "--hbm-gb-s") {
      ok = absl::SimpleAtod(value, &args.hbm_gb_s);
    } else if (flag == "--runs") {
      ok = absl::SimpleAtoi(value, &args.runs) && args.runs > 0;
    } else {
      return absl::InvalidArgumentError("unknown flag " + flag);
    }
    if (!ok) return absl::InvalidArgumentError("bad value for " + flag);
  }
  return args;
}

// Random bf16 in [-1, 1) from a hash of the index.
__global__ void FillKernel(cuda::bf16* data, int64_t count, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    data[i] = __float2bfloat16_rn(static_cast<float>(h) / 2147483648.0f - 1.0f);
  }
}

// A device allocation freed on destruction.
class Device {
 public:
  static absl::StatusOr<Device> Allocate(size_t bytes) {
    Device buffer;
    PULSE_CUDA_RETURN_IF_ERROR(cudaMalloc(&buffer.data_, bytes));
    return buffer;
  }
  Device() = default;
  Device(Device&& other) noexcept : data_(std::exchange(other.data_, nullptr)) {}
  Device& operator=(Device&&) = delete;
  ~Device() {
    if (data_ != nullptr) cudaFree(data_);
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

absl::StatusOr<Device> Random(int64_t count, uint32_t seed) {
  PULSE_ASSIGN_OR_RETURN(Device buffer, Device::Allocate(count * 2));
  FillKernel<<<1024, 256>>>(buffer.get<cuda::bf16>(), count, seed);
  PULSE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return buffer;
}

using Gemm = std::function<cudaError_t(const void* x, int32_t m, const void* w, int64_t n,
                                       int64_t k, float* y)>;

template <int kWarps, int kUnroll>
Gemm Tiling() {
  return [](const void* x, int32_t m, const void* w, int64_t n, int64_t k, float* y) {
    cuda::skinny::SkinnyGemmKernel<kWarps, kUnroll>
        <<<static_cast<unsigned>(n / cuda::skinny::kFeatures), kWarps * 32>>>(
            static_cast<const cuda::bf16*>(x), m, static_cast<const cuda::bf16*>(w), n, k, nullptr,
            y);
    return cudaGetLastError();
  };
}

absl::StatusOr<std::vector<float>> Download(const float* y, size_t count) {
  std::vector<float> host(count);
  PULSE_CUDA_RETURN_IF_ERROR(cudaMemcpy(host.data(), y, count * 4, cudaMemcpyDeviceToHost));
  return host;
}

double RelativeError(const std::vector<float>& actual, const std::vector<float>& expected) {
  double diff = 0;
  double norm = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i])) return INFINITY;
    diff += (double{actual[i]} - expected[i]) * (double{actual[i]} - expected[i]);
    norm += double{expected[i]} * expected[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

absl::Status Run(const Args& args) {
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"qkv", 6144, 4096},
                          {"o", 4096, 4096},
                          {"gate_up", 28672, 4096},
                          {"down", 4096, 14336},
                          {"lm_head", 128256, 4096}};
  constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  PULSE_ASSIGN_OR_RETURN(Device workspace, Device::Allocate(kWorkspaceBytes));
  PULSE_ASSIGN_OR_RETURN(cuda::LtGemm lt,
                         cuda::LtGemm::Create(workspace.get(), kWorkspaceBytes, 0));
  const std::vector<std::pair<std::string, Gemm>> kernels = {
      {"cublaslt",
       [&lt](const void* x, int32_t m, const void* w, int64_t n, int64_t k, float* y) {
         return lt.Run(x, m, w, n, k, nullptr, y, nullptr).ok() ? cudaSuccess : cudaErrorUnknown;
       }},
      {"skinny 16w x2 (library)",
       [](const void* x, int32_t m, const void* w, int64_t n, int64_t k, float* y) {
         return cuda::LaunchSkinnyGemm(x, m, w, n, k, nullptr, y, nullptr);
       }},
      {"skinny 4w x4", Tiling<4, 4>()},
      {"skinny 8w x4", Tiling<8, 4>()},
      {"skinny 16w x4", Tiling<16, 4>()},
      {"skinny 32w x1", Tiling<32, 1>()},
  };
  FILE* out = args.out.empty() ? nullptr : std::fopen(args.out.c_str(), "w");
  std::printf("%-8s %3s %-24s %9s %9s %8s %9s\n", "gemm", "m", "kernel", "us p50", "GB/s",
              "of floor", "rel.err");
  cudaEvent_t start;
  cudaEvent_t stop;
  PULSE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  PULSE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  absl::Status status;
  for (const Shape& shape : shapes) {
    const int64_t weight_elems = shape.n * shape.k;
    const int copies = static_cast<int>(std::max<size_t>(2, 4 * kL2Bytes / (weight_elems * 2) + 1));
    std::vector<Device> weights;
    for (int c = 0; c < copies; ++c) {
      PULSE_ASSIGN_OR_RETURN(Device w, Random(weight_elems, 100 + c));
      weights.push_back(std::move(w));
    }
    for (const int32_t m : {1, 4, 8}) {
      PULSE_ASSIGN_OR_RETURN(Device x, Random(int64_t{m} * shape.k, 7));
      PULSE_ASSIGN_OR_RETURN(Device y, Device::Allocate(int64_t{m} * shape.n * 4));
      const double bytes = weight_elems * 2.0 + m * shape.k * 2.0 + m * shape.n * 4.0;
      const double floor_us = bytes / (args.hbm_gb_s * 1e9) * 1e6;
      std::vector<float> reference;
      for (const auto& [name, gemm] : kernels) {
        // Correctness on the first weight copy, with y poisoned first.
        PULSE_CUDA_RETURN_IF_ERROR(cudaMemset(y.get(), 0xFF, int64_t{m} * shape.n * 4));
        PULSE_CUDA_RETURN_IF_ERROR(
            gemm(x.get(), m, weights[0].get(), shape.n, shape.k, y.get<float>()));
        PULSE_ASSIGN_OR_RETURN(std::vector<float> result,
                               Download(y.get<float>(), int64_t{m} * shape.n));
        if (reference.empty()) reference = result;
        const double error = RelativeError(result, reference);
        if (!(error <= 1e-5)) {
          status.Update(absl::InternalError(
              absl::StrFormat("%s m=%d %s: relative error %g", shape.name, m, name, error)));
        }
        std::vector<float> times;
        for (int run = -10; run < args.runs; ++run) {
          PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(start));
          PULSE_CUDA_RETURN_IF_ERROR(gemm(x.get(), m, weights[(run + 10) % copies].get(), shape.n,
                                          shape.k, y.get<float>()));
          PULSE_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop));
          PULSE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
          float ms = 0;
          PULSE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
          if (run >= 0) times.push_back(ms * 1000);
        }
        std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
        const double us = times[times.size() / 2];
        std::printf("%-8s %3d %-24s %9.1f %9.0f %7.0f%% %9.1e\n", shape.name, m, name.c_str(), us,
                    bytes / us / 1e3, 100 * floor_us / us, error);
        if (out != nullptr) {
          std::fprintf(out,
                       "{\"bench\": \"skinny_gemm\", \"gemm\": \"%s\", \"m\": %d, \"n\": %ld, "
                       "\"k\": %ld, \"kernel\": \"%s\", \"us_p50\": %.3f, \"bytes\": %.6g, "
                       "\"floor_us\": %.3f, \"floor_fraction\": %.4f, \"rel_err\": %.3g}\n",
                       shape.name, m, static_cast<long>(shape.n), static_cast<long>(shape.k),
                       name.c_str(), us, bytes, floor_us, floor_us / us, error);
        }
      }
    }
  }
  if (out != nullptr) std::fclose(out);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return status;
}

}  // namespace
}  // namespace pulse

int main(int argc, char** argv) {
  return pulse::RunTool("pulse-skinny-gemm-bench", pulse::kUsage, pulse::ParseArgs(argc, argv),
                        &pulse::Run);
}
