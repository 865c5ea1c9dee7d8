#include "tests/fuzz/fuzz_input.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace pulse::fuzz {
namespace {

// PULSE_FUZZ_SCRATCH when set (scripts/fuzz gives each run one and removes it after: libFuzzer
// ends without running exit handlers); else a folder for this process in /dev/shm.
const std::filesystem::path& ScratchDirectory() {
  static const std::filesystem::path directory = [] {
    const char* given = std::getenv("PULSE_FUZZ_SCRATCH");
    const std::filesystem::path root = std::filesystem::exists("/dev/shm")
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    std::filesystem::path path = given != nullptr
                                     ? std::filesystem::path(given)
                                     : root / ("pulse-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path;
  }();
  return directory;
}

}  // namespace

std::string WriteInput(std::string_view name, std::span<const uint8_t> bytes) {
  const std::filesystem::path path = ScratchDirectory() / name;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

std::string SourcePath(std::string_view relative) {
  const char* root = std::getenv("PULSE_SOURCE_DIR");
  return (std::filesystem::path(root == nullptr ? "." : root) / relative).string();
}

}  // namespace pulse::fuzz
