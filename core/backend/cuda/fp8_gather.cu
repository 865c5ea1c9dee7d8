#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <optional>

#include "core/backend/cuda/fp8_gather.h"
#include "core/backend/cuda/gather.cuh"
#include "core/backend/kv_codec.h"

namespace pulse::cuda {
namespace {

constexpr float kFp8E4m3Max = 448.0f;
// Words of codes of each part a lane loads before it decodes any: with parts of 2048 values (16
// tokens of 128), all of them.
constexpr int kUnroll = 4;

// A block of the layout as the codec sees it.
struct Fp8Shape {
  int64_t part_words;        // 16-value words a part
  int32_t parts;             // 2 * num_kv_heads: keys' parts, then values'
  int32_t scale_floats;      // the scales' 4-byte words, padding included
  int64_t host_block_bytes;  // HostBlockBytes
  int64_t block_bytes;       // the device's

  // Byte offsets of a part's codes in an encoded block and of its values in the device's block.
  __device__ int64_t codes_at(int32_t part) const {
    return int64_t{scale_floats} * 4 + part * part_words * 16;
  }
  __device__ int64_t values_at(int32_t part) const { return part * part_words * 32; }
};

std::optional<Fp8Shape> ShapeOf(const PagedKvLayout& layout) {
  if (layout.type != DType::kBF16 || layout.head_elems() % 16 != 0) return std::nullopt;
  return Fp8Shape{layout.head_elems() / 16, 2 * layout.num_kv_heads,
                  static_cast<int32_t>(Fp8KvScaleBytes(layout) / 4),
                  HostBlockBytes(layout, HostCodec::kFp8E4m3), layout.block_bytes()};
}

// Sixteen codes times `scale`, rounded to bf16.
__device__ __forceinline__ void DecodeWord(uint4 word, float scale, Bf16x8* out) {
  const uint32_t quads[4] = {word.x, word.y, word.z, word.w};
  float values[2][8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(quads[q] >> (16 * h));
      const float2 decoded = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      const int i = 4 * q + 2 * h;
      values[i / 8][i % 8] = decoded.x * scale;
      values[i / 8][i % 8 + 1] = decoded.y * scale;
    }
  }
  out[0] = Pack(values[0]);
  out[1] = Pack(values[1]);
}

// Sixteen values times `inverse`, to codes (round to nearest even, saturating).
__device__ __forceinline__ uint4 EncodeWord(const Bf16x8& low, const Bf16x8& high, float inverse) {
  float values[2][8];
  Unpack(low, values[0]);
  Unpack(high, values[1]);
  uint32_t quads[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t quad = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 4 * q + 2 * h;
      const float2 pair =
          make_float2(values[i / 8][i % 8] * inverse, values[i / 8][i % 8 + 1] * inverse);
      quad |= uint32_t{__nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3)} << (16 * h);
    }
    quads[q] = quad;
  }
  return make_uint4(quads[0], quads[1], quads[2], quads[3]);
}

// One warp decodes two parts of an encoded block into the device's block: a pair, so that a
// warp's loads in flight (4 KiB with parts of 2048 values) match the raw gather's.
__device__ __forceinline__ void DecodeParts(const char* __restrict__ encoded, int32_t first_part,
                                            int32_t second_part, char* __restrict__ block,
                                            const Fp8Shape& shape, int lane) {
  const int32_t parts[2] = {first_part, second_part};
  float scales[2];
  const uint4* codes[2];
  Bf16x8* out[2];
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    scales[p] = reinterpret_cast<const float*>(encoded)[parts[p]];
    codes[p] = reinterpret_cast<const uint4*>(encoded + shape.codes_at(parts[p]));
    out[p] = reinterpret_cast<Bf16x8*>(block + shape.values_at(parts[p]));
  }
  for (int64_t first = lane; first < shape.part_words; first += kUnroll * kWarp) {
    uint4 loaded[2][kUnroll];
#pragma unroll
    for (int p = 0; p < 2; ++p) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (first + u * kWarp < shape.part_words) loaded[p][u] = codes[p][first + u * kWarp];
      }
    }
#pragma unroll
    for (int p = 0; p < 2; ++p) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = first + u * kWarp;
        if (i < shape.part_words) DecodeWord(loaded[p][u], scales[p], out[p] + 2 * i);
      }
    }
  }
}

// One warp encodes part `part` of the device's block into its encoding: the part's scale (part 0
// zeroes the scales' padding) and codes.
__device__ __forceinline__ void EncodePart(const char* __restrict__ block, int32_t part,
                                           char* __restrict__ encoded, const Fp8Shape& shape,
                                           int lane) {
  const auto* values = reinterpret_cast<const Bf16x8*>(block + shape.values_at(part));
  float largest = 0.0f;
  for (int64_t i = lane; i < 2 * shape.part_words; i += kWarp) {
    float unpacked[8];
    Unpack(values[i], unpacked);
#pragma unroll
    for (const float value : unpacked) largest = fmaxf(largest, fabsf(value));
  }
  largest = WarpReduce(largest, MaxFloat{});
  const float inverse = largest > 0.0f ? kFp8E4m3Max / largest : 0.0f;
  auto* scales = reinterpret_cast<float*>(encoded);
  if (lane == 0) scales[part] = largest / kFp8E4m3Max;
  if (part == 0) {
    for (int32_t i = shape.parts + lane; i < shape.scale_floats; i += kWarp) scales[i] = 0.0f;
  }
  auto* codes = reinterpret_cast<uint4*>(encoded + shape.codes_at(part));
  for (int64_t i = lane; i < shape.part_words; i += kWarp) {
    codes[i] = EncodeWord(values[2 * i], values[2 * i + 1], inverse);
  }
}

// A set's misses recalled as whole blocks (one set: every pair of parts) or as its KV head's keys
// and values.
__global__ void __launch_bounds__(kGatherThreads)
    Fp8RecallListKernel(RecallList list, int32_t num_sets, HostTierView host, int32_t layer,
                        char* __restrict__ layer_blocks, int32_t first_slot, Fp8Shape shape) {
  const int lane = threadIdx.x % kWarp;
  const int32_t pairs = num_sets == 1 ? shape.parts / 2 : 1;
  const int64_t items = ListEntries(list, num_sets) * pairs;
  for (int64_t p = FirstWarp(); p < items; p += Warps()) {
    const auto [entry, set] = ListEntry(list, p / pairs);
    const auto pair = static_cast<int32_t>(p % pairs);
    const int32_t first = num_sets == 1 ? 2 * pair : set;
    const int32_t second = num_sets == 1 ? 2 * pair + 1 : shape.parts / 2 + set;
    DecodeParts(HostTierBlock(host, layer, shape.host_block_bytes, entry.host_block), first, second,
                layer_blocks + (first_slot + entry.slot) * shape.block_bytes, shape, lane);
  }
}

__global__ void __launch_bounds__(kGatherThreads)
    Fp8WriteBackListKernel(const WriteBackEntry* __restrict__ entries, int32_t count,
                           HostTierView host, int32_t layer, const char* __restrict__ layer_blocks,
                           Fp8Shape shape) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t p = FirstWarp(); p < int64_t{count} * shape.parts; p += Warps()) {
    const WriteBackEntry entry = entries[p / shape.parts];
    if (entry.device_block < 0) continue;
    EncodePart(layer_blocks + entry.device_block * shape.block_bytes,
               static_cast<int32_t>(p % shape.parts),
               HostTierBlock(host, layer, shape.host_block_bytes, entry.host_block), shape, lane);
  }
}

__global__ void __launch_bounds__(kGatherThreads)
    Fp8GatherKernel(const GatherPiece* __restrict__ pieces, int64_t count, bool to_device,
                    Fp8Shape shape) {
  const int lane = threadIdx.x % kWarp;
  // Towards the device a warp decodes a pair of parts, towards the host it encodes one.
  const int32_t per_piece = to_device ? shape.parts / 2 : shape.parts;
  for (int64_t p = FirstWarp(); p < count * per_piece; p += Warps()) {
    const GatherPiece piece = pieces[p / per_piece];
    const auto item = static_cast<int32_t>(p % per_piece);
    const auto* src = static_cast<const char*>(piece.src);
    auto* dst = static_cast<char*>(piece.dst);
    if (to_device) {
      DecodeParts(src, 2 * item, 2 * item + 1, dst, shape, lane);
    } else {
      EncodePart(src, item, dst, shape, lane);
    }
  }
}

}  // namespace

cudaError_t LaunchFp8RecallList(const RecallList& list, int32_t num_sets, const HostTierView& host,
                                int32_t layer, void* layer_blocks, int32_t first_slot,
                                const PagedKvLayout& layout, int32_t blocks, cudaStream_t stream) {
  const std::optional<Fp8Shape> shape = ShapeOf(layout);
  if (!shape || num_sets < 1 || blocks < 1 || host.blocks_per_chunk < 1) {
    return cudaErrorInvalidValue;
  }
  Fp8RecallListKernel<<<static_cast<unsigned>(blocks), kGatherThreads, 0, stream>>>(
      list, num_sets, host, layer, static_cast<char*>(layer_blocks), first_slot, *shape);
  return cudaGetLastError();
}

cudaError_t LaunchFp8WriteBackList(const WriteBackEntry* entries, int32_t count,
                                   const HostTierView& host, int32_t layer,
                                   const void* layer_blocks, const PagedKvLayout& layout,
                                   int32_t blocks, cudaStream_t stream) {
  const std::optional<Fp8Shape> shape = ShapeOf(layout);
  if (!shape || count < 0 || blocks < 1 || host.blocks_per_chunk < 1) {
    return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  Fp8WriteBackListKernel<<<GatherGrid(int64_t{count} * shape->parts, blocks), kGatherThreads, 0,
                           stream>>>(entries, count, host, layer,
                                     static_cast<const char*>(layer_blocks), *shape);
  return cudaGetLastError();
}

cudaError_t LaunchFp8Gather(const GatherPiece* pieces, int64_t count, bool to_device,
                            const PagedKvLayout& layout, int32_t blocks, cudaStream_t stream) {
  const std::optional<Fp8Shape> shape = ShapeOf(layout);
  if (!shape || blocks < 1) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  Fp8GatherKernel<<<GatherGrid(count * shape->parts, blocks), kGatherThreads, 0, stream>>>(
      pieces, count, to_device, *shape);
  return cudaGetLastError();
}

}  // namespace pulse::cuda
