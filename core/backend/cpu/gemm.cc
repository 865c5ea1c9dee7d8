#include "core/backend/cpu/gemm.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <utility>
#include <vector>

#include "core/backend/cpu/block_lanes.h"
#include "core/backend/cpu/cpu_level.h"
#include "core/backend/cpu/kquant_gemm.h"
#include "core/backend/cpu/lanes.h"

PULSE_CPU_KERNELS_BEGIN
namespace {

// Register tile: up to kMr rows of x times NrFor(rows) rows of w, one Vec accumulator each, as
// many as the level's registers hold beside the loaded vectors (32 zmm hold 16 Vecs and the
// loads; 16 ymm or xmm, two or four to a Vec, far fewer). Few rows of x (decode) take more rows
// of w at once: more loads in flight per x vector.
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
constexpr int kMr = 4;
constexpr int kNr = 8;
constexpr int64_t NrFor(int64_t mr) { return mr <= 2 ? 8 : 4; }
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
constexpr int kMr = 2;
constexpr int kNr = 3;
constexpr int64_t NrFor(int64_t mr) { return mr <= 1 ? 3 : 2; }
#else
constexpr int kMr = 2;
constexpr int kNr = 2;
constexpr int64_t NrFor(int64_t mr) { return mr <= 1 ? 2 : 1; }
#endif
// Cache tile: kTileN rows of w (kept in L2) times kTileM rows of x; threads take whole tiles.
constexpr int64_t kTileN = 64;
constexpr int64_t kTileM = 64;

// The K-quant kernels of this level.
#if PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX512
constexpr CpuLevel kQuantLevel = CpuLevel::kAvx512;
#elif PULSE_CPU_LEVEL == PULSE_CPU_LEVEL_AVX2
constexpr CpuLevel kQuantLevel = CpuLevel::kAvx2;
#else
constexpr CpuLevel kQuantLevel = CpuLevel::kGeneric;
#endif

struct GemmArgs {
  const float* x;
  int64_t m;
  const void* w;
  int64_t n;
  int64_t k;
  const float* bias;
  float* y;
};

// How a microkernel reads the rows of w, kVecs Vecs at a time: fp32 or bf16 elements, or ggml
// blocks decoded as the GGUF reader decodes them (block_lanes.h), a block of two Vecs at a time
// (rows of whole blocks, so no partial Vec).
template <typename W>
struct ElementRows {
  using Row = const W*;
  static constexpr int kVecs = 1;
  static constexpr bool kWholeVecs = false;
  static Row RowAt(const GemmArgs& a, int64_t j) { return static_cast<const W*>(a.w) + j * a.k; }
  static void Load(Row row, int64_t kk, Vec* out) { out[0] = LoadVec(row + kk); }
  static Vec LoadPartial(Row row, int64_t kk, int64_t count) {
    return LoadPartialVec(row + kk, count);
  }
};

// How far ahead of the block being read a row is prefetched: a decode step streams the weights
// once, in rows too short for the hardware prefetcher to ramp up.
constexpr int64_t kPrefetchBytes = 4096;

template <DType kType>
struct BlockRows {
  using Row = const std::byte*;
  static constexpr int kVecs = kGgmlBlockValues / kLanes;
  static constexpr bool kWholeVecs = true;
  static Row RowAt(const GemmArgs& a, int64_t j) {
    return static_cast<const std::byte*>(a.w) + j * BlockRowBytes(kType, a.k);
  }
  static void Load(Row row, int64_t kk, Vec* out) {
    const std::byte* block = row + kk / kGgmlBlockValues * BlockTypeBytes(kType);
    __builtin_prefetch(block + kPrefetchBytes);
    LoadBlock<kType>(block, out);
  }
};

// y[i][j] for the MR x NR block at (x row i0, w row j0); each element accumulates exactly as
// Dot(x row, w row, k) does (a load's Vecs in index order into the same accumulator).
template <typename Rows, int MR, int NR>
void MicroKernel(const GemmArgs& a, int64_t i0, int64_t j0) {
  constexpr int kVecs = Rows::kVecs;
  const int64_t k = a.k;
  const float* x = a.x + i0 * k;
  typename Rows::Row w[NR];
  for (int c = 0; c < NR; ++c) w[c] = Rows::RowAt(a, j0 + c);
  Vec acc[MR][NR] = {};
  constexpr int64_t kStep = int64_t{kVecs} * kLanes;
  int64_t kk = 0;
  for (; kk + kStep <= k; kk += kStep) {
    Vec wv[NR][kVecs];
#pragma GCC unroll 8
    for (int c = 0; c < NR; ++c) Rows::Load(w[c], kk, wv[c]);
#pragma GCC unroll 2
    for (int v = 0; v < kVecs; ++v) {
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const Vec xv = LoadVec(x + r * k + kk + int64_t{v} * kLanes);
#pragma GCC unroll 8
        for (int c = 0; c < NR; ++c) acc[r][c] = MulAdd(xv, wv[c][v], acc[r][c]);
      }
    }
  }
  if constexpr (!Rows::kWholeVecs) {
    if (kk < k) {
      Vec wv[NR];
      for (int c = 0; c < NR; ++c) wv[c] = Rows::LoadPartial(w[c], kk, k - kk);
      for (int r = 0; r < MR; ++r) {
        const Vec xv = LoadPartialVec(x + r * k + kk, k - kk);
        for (int c = 0; c < NR; ++c) acc[r][c] = MulAdd(xv, wv[c], acc[r][c]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* y = a.y + (i0 + r) * a.n + j0;
    for (int c = 0; c < NR; ++c) {
      const float dot = ReduceLanes(acc[r][c]);
      y[c] = a.bias != nullptr ? dot + a.bias[j0 + c] : dot;
    }
  }
}

using KernelFn = void (*)(const GemmArgs&, int64_t, int64_t);

template <typename Rows, int MR, int... NRs>
constexpr auto KernelRow(std::integer_sequence<int, NRs...>) {
  return std::array<KernelFn, kNr>{&MicroKernel<Rows, MR, NRs + 1>...};
}

template <typename Rows, int... MRs>
constexpr auto KernelTable(std::integer_sequence<int, MRs...>) {
  return std::array<std::array<KernelFn, kNr>, kMr>{
      KernelRow<Rows, MRs + 1>(std::make_integer_sequence<int, kNr>())...};
}

// kKernels<Rows>[mr - 1][nr - 1] handles an mr x nr block (mr <= kMr, nr <= kNr).
template <typename Rows>
constexpr auto kKernels = KernelTable<Rows>(std::make_integer_sequence<int, kMr>());

template <typename Rows>
void RunTile(const GemmArgs& a, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  for (int64_t i = i_begin; i < i_end; i += kMr) {
    const int64_t mr = std::min<int64_t>(kMr, i_end - i);
    for (int64_t j = j_begin; j < j_end; j += NrFor(mr)) {
      const int64_t nr = std::min<int64_t>(NrFor(mr), j_end - j);
      kKernels<Rows>[mr - 1][nr - 1](a, i, j);
    }
  }
}

template <typename Rows>
void GemmTiles(ThreadPool& pool, const GemmArgs& a) {
  const int64_t tiles_n = (a.n + kTileN - 1) / kTileN;
  const int64_t tiles_m = (a.m + kTileM - 1) / kTileM;
  // Tile t = (tm, tn) with tm fastest, so a thread's consecutive tiles reuse one tile of w.
  pool.ParallelFor(tiles_m * tiles_n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t tm = t % tiles_m;
      const int64_t tn = t / tiles_m;
      RunTile<Rows>(a, tm * kTileM, std::min(a.m, (tm + 1) * kTileM), tn * kTileN,
                    std::min(a.n, (tn + 1) * kTileN));
    }
  });
}

// As GemmTiles over block rows, each tile of w decoded once into fp32 (the values LoadBlock
// gives, so the same bits) and multiplied by the fp32 kernels: worth it where more than one
// register tile of x rows would decode every block again.
template <DType kType>
void DecodedBlockTiles(ThreadPool& pool, const GemmArgs& a) {
  const int64_t tiles_n = (a.n + kTileN - 1) / kTileN;
  const int64_t tiles_m = (a.m + kTileM - 1) / kTileM;
  pool.ParallelFor(tiles_m * tiles_n, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> decoded(static_cast<size_t>(kTileN * a.k));
    int64_t decoded_tn = -1;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t tm = t % tiles_m;
      const int64_t tn = t / tiles_m;
      const int64_t j_begin = tn * kTileN;
      const int64_t rows = std::min(a.n, j_begin + kTileN) - j_begin;
      if (tn != decoded_tn) {
        for (int64_t j = 0; j < rows; ++j) {
          const std::byte* row = BlockRows<kType>::RowAt(a, j_begin + j);
          for (int64_t kk = 0; kk < a.k; kk += kGgmlBlockValues) {
            Vec v[BlockRows<kType>::kVecs];
            BlockRows<kType>::Load(row, kk, v);
            std::memcpy(decoded.data() + j * a.k + kk, v, sizeof(v));
          }
        }
        decoded_tn = tn;
      }
      // The tile's columns of y and bias, against the decoded rows from 0.
      const GemmArgs tile{a.x,          a.m, decoded.data(),
                          a.n,          a.k, a.bias == nullptr ? nullptr : a.bias + j_begin,
                          a.y + j_begin};
      RunTile<ElementRows<float>>(tile, tm * kTileM, std::min(a.m, (tm + 1) * kTileM), 0, rows);
    }
  });
}

template <DType kType>
void BlockGemm(ThreadPool& pool, const GemmArgs& a) {
  if (a.m > kMr) {
    DecodedBlockTiles<kType>(pool, a);
  } else {
    GemmTiles<BlockRows<kType>>(pool, a);
  }
}

}  // namespace

void Gemm(ThreadPool& pool, const float* x, int64_t m, const MatrixView& w, const float* bias,
          float* y) {
  assert(m >= 0 && w.rows >= 0 && w.cols >= 0);
  if (m == 0 || w.rows == 0) return;
  const GemmArgs args{x, m, w.data, w.rows, w.cols, bias, y};
  switch (w.type) {
    case DType::kF32:
      GemmTiles<ElementRows<float>>(pool, args);
      return;
    case DType::kBF16:
      GemmTiles<ElementRows<uint16_t>>(pool, args);
      return;
    case DType::kQ8_0:
      return BlockGemm<DType::kQ8_0>(pool, args);
    case DType::kQ4_0:
      return BlockGemm<DType::kQ4_0>(pool, args);
    case DType::kQ4_1:
      return BlockGemm<DType::kQ4_1>(pool, args);
    case DType::kQ4_K:
    case DType::kQ6_K:
      KQuantGemm(pool, x, m, w, bias, y, kQuantLevel);
      return;
  }
}

PULSE_CPU_KERNELS_END
