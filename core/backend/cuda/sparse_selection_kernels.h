// Launchers of the device-driven sparse step's kernels (the CPU reference is
// core/backend/reference/sparse_selection.h). As in kernels.h, each enqueues its work on `stream`
// and returns the launch's error; the arrays are device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/backend/block_scores.h"
#include "core/backend/paged_kv.h"
#include "core/backend/sparse_tables.h"

namespace pulse::cuda {

// Backend::SelectTopBlocks: a block a (segment, set).
cudaError_t LaunchSelectTopBlocks(const float* scores, const ScoreSegment* segments,
                                  int32_t num_segments, int32_t max_sets, int32_t* picked,
                                  cudaStream_t stream);
// Backend::BuildSparseTables: a grid that resolves each (pick, set) and fills the fixed entries,
// then, when the directory has sets, a block a set that lists the misses and chooses their
// victims. `scratch` is device memory of BuildSparseTablesScratchBytes(build) bytes, where the
// misses wait between the two.
int64_t BuildSparseTablesScratchBytes(const SparseTableBuild& build);
cudaError_t LaunchBuildSparseTables(const SparseTableBuild& build, void* scratch,
                                    cudaStream_t stream);
// Backend::ForgetSlots.
cudaError_t LaunchForgetSlots(const SlotDirectoryView& directory, const int32_t* blocks,
                              int32_t count, cudaStream_t stream);
// Backend::AdoptFreeSlots: a block a (set, layer) assigns the slots, then a block a (entry, set,
// layer) copies. The layers' fragments must be multiples of 16 bytes.
cudaError_t LaunchAdoptFreeSlots(const SlotLayer* layers, int32_t num_layers, int32_t max_sets,
                                 int32_t max_slots, const WriteBackEntry* entries, int32_t count,
                                 const PagedKvLayout& layout, cudaStream_t stream);

// The copy engine's kernels over lists the device built (gather.cu), on at most `blocks` thread
// blocks: the recall of `list` (Backend::EnqueueRecall) and the write-back of `count` entries
// (Backend::EnqueueWriteBack), warps copying 16-byte words through the host tier's mapping.
cudaError_t LaunchRecallList(const RecallList& list, int32_t num_sets, const HostTierView& host,
                             int32_t layer, void* layer_blocks, int32_t first_slot,
                             const PagedKvLayout& layout, int32_t blocks, cudaStream_t stream);
cudaError_t LaunchWriteBackList(const WriteBackEntry* entries, int32_t count,
                                const HostTierView& host, int32_t layer, const void* layer_blocks,
                                const PagedKvLayout& layout, int32_t blocks, cudaStream_t stream);

}  // namespace pulse::cuda
