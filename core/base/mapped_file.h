// A read-only memory mapping of a whole file, released on destruction; and the bounded read of a
// small file's text. Both take regular files only: a FIFO, a device or a directory is refused
// before anything is read (a FIFO without a writer would block, a device never end).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "core/base/status.h"

namespace pulse {

class MappedFile {
 public:
  // NotFound for a missing file (other errno values map as absl::ErrnoToStatus does, a symlink
  // loop as InvalidArgument), InvalidArgument for a file that is not a regular file.
  static absl::StatusOr<MappedFile> Open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const std::byte* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void Release();

  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// The contents of the regular file at `path`, as MappedFile::Open takes it; InvalidArgument when
// it holds more than `max_bytes`.
absl::StatusOr<std::string> ReadFileText(const std::string& path, size_t max_bytes);

}  // namespace pulse
