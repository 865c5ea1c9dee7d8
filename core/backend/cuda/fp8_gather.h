// The copy engine's kernels for an fp8 host tier (HostCodec::kFp8E4m3, core/backend/kv_codec.h):
// the recall decodes what it reads into the device's bf16 blocks and the write-back encodes what
// it writes, bit for bit as core/backend/reference/fp8_kv_block.h does, a warp a part (one KV
// head's keys or values of a block) at a time. They take bf16 layouts whose parts are whole
// 16-value words, and return cudaErrorInvalidValue for others.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend/cuda/kernels.h"
#include "core/backend/paged_kv.h"
#include "core/backend/sparse_tables.h"

namespace pulse::cuda {

// LaunchRecallList and LaunchWriteBackList (sparse_selection_kernels.h) of an fp8 host tier.
cudaError_t LaunchFp8RecallList(const RecallList& list, int32_t num_sets, const HostTierView& host,
                                int32_t layer, void* layer_blocks, int32_t first_slot,
                                const PagedKvLayout& layout, int32_t blocks, cudaStream_t stream);
cudaError_t LaunchFp8WriteBackList(const WriteBackEntry* entries, int32_t count,
                                   const HostTierView& host, int32_t layer,
                                   const void* layer_blocks, const PagedKvLayout& layout,
                                   int32_t blocks, cudaStream_t stream);
// A copy plan with the fp8 codec: each of pieces[0..count) (device memory) is one whole block of
// `layout`, decoded from src into dst `to_device`, else encoded; `words` is not read.
cudaError_t LaunchFp8Gather(const GatherPiece* pieces, int64_t count, bool to_device,
                            const PagedKvLayout& layout, int32_t blocks, cudaStream_t stream);

}  // namespace pulse::cuda
