// MappedFile and ReadFileText take regular files only, and never block or read without end on
// what is not one.
#include "core/base/mapped_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pulse {
namespace {

using ::testing::HasSubstr;

class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pulse-mapped-file-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

TEST_F(MappedFileTest, ReadsARegularFile) {
  std::ofstream(Path("a.txt")) << "hello";
  absl::StatusOr<MappedFile> file = MappedFile::Open(Path("a.txt"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->bytes().size(), 5u);
  absl::StatusOr<std::string> text = ReadFileText(Path("a.txt"), 5);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hello");
  const absl::Status big = ReadFileText(Path("a.txt"), 4).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.message(), HasSubstr("holds 5 bytes, more than the 4"));
  EXPECT_EQ(MappedFile::Open(Path("missing")).status().code(), absl::StatusCode::kNotFound);
}

// A FIFO without a writer would block a plain open, and a read of it forever.
TEST_F(MappedFileTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  const absl::Status status = ReadFileText(Path("fifo"), 1 << 20).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("is not a regular file"));
}

// A device never ends: it is refused before anything is read.
TEST_F(MappedFileTest, ADeviceOrADirectoryIsRefused) {
  std::filesystem::create_symlink("/dev/zero", Path("zero"));
  EXPECT_EQ(ReadFileText(Path("zero"), 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MappedFile::Open(dir_.string()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MappedFileTest, ASymlinkLoopIsAnInvalidArgument) {
  std::filesystem::create_symlink(Path("b"), Path("a"));
  std::filesystem::create_symlink(Path("a"), Path("b"));
  const absl::Status status = MappedFile::Open(Path("a")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("a loop of symbolic links"));
}

}  // namespace
}  // namespace pulse
