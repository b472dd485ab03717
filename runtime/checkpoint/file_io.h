// POSIX file helpers for durable, atomic checkpoint writes. Every failure throws CheckpointError
// naming the path, the operation and strerror(errno).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fsdp::runtime::checkpoint {

// An owned file descriptor, closed on destruction.
class File {
 public:
  File() = default;
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~File();
  File(File&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  static File create_new(const std::string& path);  // O_CREAT | O_EXCL, write-only
  static File open_read(const std::string& path);
  static File open_write(const std::string& path);  // existing file, write-only

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  int64_t size() const;
  void pwrite_all(const void* data, size_t bytes, int64_t offset);
  // Reads exactly `bytes`; returns fewer only at end of file.
  size_t pread_some(void* data, size_t bytes, int64_t offset) const;
  void truncate(int64_t bytes);
  void sync();  // fsync
  void close();  // close, throwing on failure (the destructor only logs nothing)

 private:
  int fd_ = -1;
  std::string path_;
};

// fsync of a directory: makes the entries created or renamed in it durable.
void sync_dir(const std::string& dir);
// rename(2) then fsync of the destination's directory.
void rename_durable(const std::string& from, const std::string& to);
// Writes `contents` to path via path.tmp-<nonce> + fsync + rename + fsync(dir): readers see the old or
// the new contents, never a mix.
void write_file_atomic(const std::string& path, std::string_view contents);
std::string read_file(const std::string& path);
std::string parent_dir(const std::string& path);
// A value unlikely to repeat across processes and time (pid, clock, address entropy).
uint64_t make_nonce();

}  // namespace fsdp::runtime::checkpoint
