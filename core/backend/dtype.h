// Element types of backend memory. Math always accumulates in fp32. (C++17: kernels include it.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/backend/host_device.h"

namespace pulse {

enum class DType : uint8_t { kF32, kBF16 };

std::string_view DTypeName(DType type);

PULSE_HOST_DEVICE constexpr size_t DTypeBytes(DType type) { return type == DType::kBF16 ? 2 : 4; }

}  // namespace pulse
