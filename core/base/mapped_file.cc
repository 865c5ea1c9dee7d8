#include "core/base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pulse {

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  // Non-blocking: opening a FIFO without a writer returns at once (it is then refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot open '", path, "': a loop of symbolic links"));
    }
    return absl::ErrnoToStatus(err, absl::StrCat("cannot open '", path, "'"));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("cannot stat '", path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return MappedFile(path, nullptr, 0);
  }
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (data == MAP_FAILED) {
    return absl::ErrnoToStatus(err, absl::StrCat("cannot map '", path, "'"));
  }
  return MappedFile(path, static_cast<const std::byte*>(data), size);
}

absl::StatusOr<std::string> ReadFileText(const std::string& path, size_t max_bytes) {
  PULSE_ASSIGN_OR_RETURN(const MappedFile file, MappedFile::Open(path));
  if (file.bytes().size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' holds ", file.bytes().size(),
                                                   " bytes, more than the ", max_bytes,
                                                   " such a file may"));
  }
  return std::string(reinterpret_cast<const char*>(file.bytes().data()), file.bytes().size());
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { Release(); }

void MappedFile::Release() {
  if (data_ != nullptr) {
    ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
}

}  // namespace pulse
