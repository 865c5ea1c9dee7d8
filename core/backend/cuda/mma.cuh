// Warp-level tensor-core and asynchronous-copy primitives (sm_80 and later): mma.sync m16n8k16
// bf16 with fp32 accumulation, ldmatrix, and cp.async. Fragment layouts are PTX's.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace pulse::cuda {

__device__ __forceinline__ uint32_t SharedAddress(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// d += a * b for a 16x16 (row-major) bf16 A, a 16x8 (column-major) bf16 B, fp32 C/D.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void LoadMatrixX4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// As LoadMatrixX4, each matrix transposed.
__device__ __forceinline__ void LoadMatrixX4Trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// The transpose of an 8x8 b16 matrix held as a fragment (lane l: row l / 4, columns 2 (l % 4) and
// 2 (l % 4) + 1), as the same kind of fragment.
__device__ __forceinline__ uint32_t TransposeMatrix(uint32_t fragment) {
  uint32_t transposed;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n"
               : "=r"(transposed)
               : "r"(fragment));
  return transposed;
}

// Copies 16 bytes from global to shared memory asynchronously; with `valid` false it writes 16
// zero bytes and reads nothing.
__device__ __forceinline__ void CopyAsync16(uint32_t shared_address, const void* global,
                                            bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address), "l"(global),
               "r"(bytes));
}

__device__ __forceinline__ void CopyAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Element offset of (row, 16-byte chunk) in a shared tile of rows of kRowElems bf16 whose chunks
// are XOR-swizzled by the row, so that ldmatrix reads of 8 rows at one column hit 8 different bank
// groups.
template <int kRowElems>
__device__ __forceinline__ int SwizzledOffset(int row, int chunk) {
  return row * kRowElems + ((chunk ^ (row % 8)) * 8);
}

// Two floats as one register of two bf16, the first in the low half.
__device__ __forceinline__ uint32_t PackBf16(float first, float second) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(first, second);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

}  // namespace pulse::cuda
