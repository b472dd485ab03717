#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace fsdp {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("fsdp-atomic-file-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(AtomicFile, ReplacesTheWholeFileAndLeavesNoTemporary) {
  TempDir dir;
  const fs::path file = dir.path / "port";
  EXPECT_EQ(write_file_atomically(file, "12345 678\n"), "");
  EXPECT_EQ(read(file), "12345 678\n");
  EXPECT_EQ(write_file_atomically(file, "1"), "");
  EXPECT_EQ(read(file), "1");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}), 1);
}

TEST(AtomicFile, FailureSaysWhatAndWhere) {
  TempDir dir;
  const fs::path file = dir.path / "missing-folder" / "f";
  const std::string error = write_file_atomically(file, "x");
  EXPECT_NE(error.find("create " + file.string() + ".tmp-"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
}

TEST(AtomicFile, RenameOntoADirectoryFailsAndRemovesTheTemporary) {
  TempDir dir;
  fs::create_directories(dir.path / "taken" / "child");
  const std::string error = write_file_atomically(dir.path / "taken", "x");
  EXPECT_NE(error.find("rename to " + (dir.path / "taken").string()), std::string::npos) << error;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}), 1);
}

}  // namespace
}  // namespace fsdp
