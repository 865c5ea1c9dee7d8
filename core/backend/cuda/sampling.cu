// Backend::SampleTokens on the GPU: sampling.h's algorithm, one block per row of logits.
//
// The candidate set is never materialised: after top-k, top-p and min-p it is "key >= key_floor
// and weight >= weight_floor", and each selection ("the largest key K with Mass(>= K) >=
// threshold") is a radix search over the 64-bit keys, 8 bits a pass, summing counts or weights
// into per-warp histograms in shared memory with integer atomics (so the sums, and the token, do
// not depend on timing). Weights are computed once into global scratch; the penalised ids are a
// bitmap in shared memory.
#include "core/backend/cuda/device_math.cuh"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/launch.cuh"
#include "core/backend/sampling.h"

namespace pulse::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / kWarp;
constexpr int kBins = 256;
constexpr int kDigitBits = 8;
constexpr float kInfinity = __builtin_huge_valf();

using u64 = unsigned long long;

struct Row {
  const float* logits;
  const uint32_t* penalised;  // bitmap of the penalised ids, or null
  float penalty;
  int32_t vocab;
  uint32_t* weights;

  __device__ float Logit(int32_t i) const {
    const float logit = logits[i];
    if (penalised != nullptr && ((penalised[i >> 5] >> (i & 31)) & 1u) != 0) {
      return PenalisedLogit(logit, penalty);
    }
    return logit;
  }
};

// Mass (or count) of the candidates.
__device__ u64 CandidateMass(const Row& row, u64 key_floor, uint32_t weight_floor, u64* shared) {
  u64 mass = 0;
  for (int32_t i = threadIdx.x; i < row.vocab; i += kThreads) {
    const uint32_t weight = row.weights[i];
    if (weight >= weight_floor && SampleKey(row.Logit(i), i) >= key_floor) mass += weight;
  }
  return BlockReduce(mass, u64{0}, Add{}, shared);
}

// The largest candidate key K with Mass(>= K) >= threshold (counts instead of weights when
// `count`). `histograms` is [kWarps][kBins] in shared memory.
__device__ u64 LargestKeyWithMass(const Row& row, u64 key_floor, uint32_t weight_floor,
                                  u64 threshold, bool count, u64* histograms, u64* shared) {
  u64 prefix = 0;
  u64 above = 0;  // the mass of the candidates above the current prefix's bin
  u64* own = histograms + (threadIdx.x / kWarp) * kBins;
  for (int shift = 64 - kDigitBits; shift >= 0; shift -= kDigitBits) {
    for (int b = threadIdx.x; b < kWarps * kBins; b += kThreads) histograms[b] = 0;
    __syncthreads();
    const u64 high = shift + kDigitBits >= 64 ? 0 : ~0ull << (shift + kDigitBits);
    for (int32_t i = threadIdx.x; i < row.vocab; i += kThreads) {
      const uint32_t weight = row.weights[i];
      const u64 key = SampleKey(row.Logit(i), i);
      if (weight >= weight_floor && key >= key_floor && (key & high) == (prefix & high)) {
        atomicAdd(own + ((key >> shift) & (kBins - 1)), count ? 1ull : u64{weight});
      }
    }
    __syncthreads();
    if (threadIdx.x < kBins) {  // merge the warps' histograms into warp 0's
      u64 total = 0;
      for (int w = 0; w < kWarps; ++w) total += histograms[w * kBins + threadIdx.x];
      histograms[threadIdx.x] = total;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 cumulative = above;
      int digit = 0;
      for (int d = kBins - 1; d >= 0; --d) {
        if (cumulative + histograms[d] >= threshold) {
          digit = d;
          break;
        }
        cumulative += histograms[d];
      }
      shared[0] = prefix | (u64(digit) << shift);
      shared[1] = cumulative;
    }
    __syncthreads();
    prefix = shared[0];
    above = shared[1];
    __syncthreads();
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads)
    SampleTokensKernel(const float* __restrict__ logits, int32_t vocab,
                       const TokenSampling* __restrict__ params,
                       const int32_t* __restrict__ history, uint32_t* __restrict__ weights,
                       int32_t* __restrict__ tokens) {
  WaitForPriorGrids();
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  u64* histograms = reinterpret_cast<u64*>(shared_bytes);  // [kWarps][kBins]
  uint32_t* bitmap = reinterpret_cast<uint32_t*>(histograms + kWarps * kBins);
  __shared__ u64 shared[kWarps];
  __shared__ float best_value[kWarps];
  __shared__ int32_t best_id[kWarps];

  const int64_t r = blockIdx.x;
  const TokenSampling p = params[r];
  const bool penalise = p.repetition_penalty != 1.0f && p.history_count > 0;
  Row row{logits + r * vocab, penalise ? bitmap : nullptr, p.repetition_penalty, vocab,
          weights + r * vocab};
  if (penalise) {
    for (int32_t w = threadIdx.x; w < (vocab + 31) / 32; w += kThreads) bitmap[w] = 0;
    __syncthreads();
    for (int32_t j = threadIdx.x; j < p.history_count; j += kThreads) {
      const int32_t id = history[p.history_offset + j];
      if (id >= 0 && id < vocab) atomicOr(bitmap + (id >> 5), 1u << (id & 31));
    }
    __syncthreads();
  }

  // Validity and the argmax (lowest id on ties).
  bool bad = false;
  float best = -kInfinity;
  int32_t best_at = -1;
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float logit = row.Logit(i);
    bad |= isnan(logit) || logit == kInfinity;
    if (logit != -kInfinity && (best_at < 0 || logit > best)) {
      best = logit;
      best_at = i;
    }
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int32_t other_at = __shfl_xor_sync(0xffffffffu, best_at, offset);
    if (other_at >= 0 && (best_at < 0 || other > best || (other == best && other_at < best_at))) {
      best = other;
      best_at = other_at;
    }
  }
  if (threadIdx.x % kWarp == 0) {
    best_value[threadIdx.x / kWarp] = best;
    best_id[threadIdx.x / kWarp] = best_at;
  }
  bad = __syncthreads_or(bad);
  best = -kInfinity;
  best_at = -1;
  for (int w = 0; w < kWarps; ++w) {
    if (best_id[w] >= 0 &&
        (best_at < 0 || best_value[w] > best || (best_value[w] == best && best_id[w] < best_at))) {
      best = best_value[w];
      best_at = best_id[w];
    }
  }
  if (bad || best_at < 0 || p.temperature == 0.0f) {
    if (threadIdx.x == 0) tokens[r] = bad ? -1 : best_at;
    return;
  }

  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    row.weights[i] = static_cast<uint32_t>(SampleWeight(row.Logit(i), best, p.temperature));
  }
  // Every thread reads back only the weights it wrote: no barrier needed.
  u64 key_floor = 0;
  uint32_t weight_floor = 0;
  if (p.top_k > 0 && p.top_k < vocab) {
    key_floor = LargestKeyWithMass(row, 0, 0, u64(p.top_k), true, histograms, shared);
  }
  if (p.top_p < 1.0f) {
    const u64 total = CandidateMass(row, key_floor, 0, shared);
    u64 target = static_cast<u64>(ceil(static_cast<double>(p.top_p) * static_cast<double>(total)));
    target = target < 1 ? 1 : target;
    key_floor = LargestKeyWithMass(row, key_floor, 0, target, false, histograms, shared);
  }
  if (p.min_p > 0.0f) {
    const u64 least = static_cast<u64>(
        ceil(static_cast<double>(p.min_p) * static_cast<double>(1ull << kSampleWeightBits)));
    weight_floor = static_cast<uint32_t>(least < kSampleWeightMax ? least : kSampleWeightMax);
  }
  const u64 mass = CandidateMass(row, key_floor, weight_floor, shared);
  u64 target = static_cast<u64>(p.uniform * static_cast<double>(mass));
  target = target < mass - 1 ? target : mass - 1;
  const u64 key =
      LargestKeyWithMass(row, key_floor, weight_floor, target + 1, false, histograms, shared);
  if (threadIdx.x == 0) tokens[r] = SampleKeyId(key);
}

int SharedBytes(int64_t vocab) {
  return static_cast<int>(kWarps * kBins * sizeof(u64) + (vocab + 31) / 32 * sizeof(uint32_t));
}

}  // namespace

int64_t SampleTokensScratchWords(int64_t rows, int64_t vocab) { return rows * vocab; }

cudaError_t LaunchSampleTokens(const float* logits, int64_t rows, int64_t vocab,
                               const TokenSampling* params, const int32_t* history,
                               uint32_t* scratch, int32_t* tokens, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int shared = SharedBytes(vocab);
  if (const cudaError_t error = cudaFuncSetAttribute(
          SampleTokensKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
      error != cudaSuccess) {
    return error;
  }
  return LaunchKernel(SampleTokensKernel, static_cast<unsigned>(rows), kThreads, shared, stream,
                      logits, static_cast<int32_t>(vocab), params, history, scratch, tokens);
}

}  // namespace pulse::cuda
