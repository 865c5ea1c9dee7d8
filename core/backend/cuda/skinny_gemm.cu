// cuda::LaunchSkinnyGemm: the tiling of skinny_gemm.cuh, and when the backend prefers it to
// cuBLASLt, both from pulse-skinny-gemm-bench on the H200 (samples/bench/results).
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/skinny_gemm.cuh"

namespace pulse::cuda {
namespace {

// 16 warps split each block's k, two stages of 2 chunks in flight a lane: of the tilings timed,
// the fastest at 1 and 8 rows on every weight of few output features.
constexpr int kWarps = 16;
constexpr int kUnroll = 2;
// Blocks of 16 features an SM up to which the kernel beat cuBLASLt (Llama-3.1-8B's qkv, o and down
// projections: 384, 256 and 256 blocks on 132 SMs); on wider weights (gate_up, lm_head) cuBLASLt
// was as fast or faster.
constexpr int64_t kMaxBlocksPerSm = 4;

bool Aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

bool Runs(const void* x, int64_t m, const void* w, int64_t n, int64_t k) {
  return m >= 1 && m <= skinny::kMaxRows && n > 0 && n % skinny::kFeatures == 0 &&
         n / skinny::kFeatures < (int64_t{1} << 31) && k > 0 && k % skinny::kChunk == 0 &&
         Aligned16(x) && Aligned16(w);
}

}  // namespace

bool PreferSkinnyGemm(const void* x, int64_t m, const void* w, int64_t n, int64_t k,
                      int32_t sm_count) {
  return Runs(x, m, w, n, k) && n / skinny::kFeatures <= kMaxBlocksPerSm * sm_count;
}

cudaError_t LaunchSkinnyGemm(const void* x, int64_t m, const void* w, int64_t n, int64_t k,
                             const float* bias, float* y, cudaStream_t stream) {
  if (!Runs(x, m, w, n, k)) return cudaErrorInvalidValue;
  skinny::SkinnyGemmKernel<kWarps, kUnroll>
      <<<static_cast<unsigned>(n / skinny::kFeatures), kWarps * 32, 0, stream>>>(
          static_cast<const bf16*>(x), static_cast<int32_t>(m), static_cast<const bf16*>(w), n, k,
          bias, y);
  return cudaGetLastError();
}

}  // namespace pulse::cuda
