// The zero-copy gather (and scatter) kernel of the copy engine: warps copy pieces of a plan
// through 16-byte loads and stores, one side of which is mapped host memory, so a few SMs keep
// PCIe busy with many small transfers at once.
#include <algorithm>

#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"

namespace pulse::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarpsPerBlock = kThreads / kWarp;
// Loads in flight per lane before the stores: 4 KiB per warp, which covers PCIe latency.
constexpr int kUnroll = 8;

__global__ void __launch_bounds__(kThreads)
    GatherKernel(const GatherPiece* __restrict__ pieces, int64_t count) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t{gridDim.x} * kWarpsPerBlock;
  for (int64_t p = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp; p < count;
       p += warps) {
    const GatherPiece piece = pieces[p];
    const uint4* __restrict__ src = static_cast<const uint4*>(piece.src);
    uint4* __restrict__ dst = static_cast<uint4*>(piece.dst);
    uint32_t i = lane;
    for (; i + (kUnroll - 1) * kWarp < piece.words; i += kUnroll * kWarp) {
      uint4 words[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) words[u] = src[i + u * kWarp];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) dst[i + u * kWarp] = words[u];
    }
    for (; i < piece.words; i += kWarp) dst[i] = src[i];
  }
}

}  // namespace

cudaError_t LaunchGather(const GatherPiece* pieces, int64_t count, int32_t blocks,
                         cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const int64_t grid = std::min<int64_t>(blocks, CeilDiv(count, kWarpsPerBlock));
  GatherKernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(pieces, count);
  return cudaGetLastError();
}

}  // namespace pulse::cuda
