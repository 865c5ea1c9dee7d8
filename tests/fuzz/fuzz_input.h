// What the fuzz targets share: a fuzz input written where a reader that takes a path finds it,
// and the repository's assets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pulse::fuzz {

// `bytes` written to a file named `name` in this process's scratch directory (PULSE_FUZZ_SCRATCH,
// or a folder of its own in /dev/shm); returns its path. The same name is overwritten input
// after input.
std::string WriteInput(std::string_view name, std::span<const uint8_t> bytes);

// A file of the repository: PULSE_SOURCE_DIR (the fuzz scripts set it), or the working
// directory, joined with `relative`.
std::string SourcePath(std::string_view relative);

inline std::string_view Text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace pulse::fuzz
