// Rows of a matrix kept in ggml's blocks (dtype.h's block types), read as stored.
#pragma once

#include <cstdint>

#include "core/backend/dtype.h"

namespace pulse::cpu {

// The values of a row of `cols` values of block type `type` at `row`, as the GGUF reader decodes
// them (core/base/ggml_blocks.h).
void DecodeBlockRow(DType type, const void* row, int64_t cols, float* out);

}  // namespace pulse::cpu
