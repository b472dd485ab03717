#include "runtime/checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "runtime/checkpoint/errors.h"

namespace fsdp::runtime::checkpoint {
namespace {

[[noreturn]] void fail(const std::string& op, const std::string& path) {
  throw CheckpointError(op + " '" + path + "' failed: " + std::strerror(errno));
}

File open_with(const std::string& path, int flags, const char* op) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) fail(op, path);
  return File(fd, path);
}

}  // namespace

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

File File::create_new(const std::string& path) { return open_with(path, O_WRONLY | O_CREAT | O_EXCL, "create"); }
File File::open_read(const std::string& path) { return open_with(path, O_RDONLY, "open"); }
File File::open_write(const std::string& path) { return open_with(path, O_WRONLY, "open for writing"); }

int64_t File::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("fstat", path_);
  return static_cast<int64_t>(st.st_size);
}

void File::pwrite_all(const void* data, size_t bytes, int64_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", path_);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += n;
  }
}

size_t File::pread_some(void* data, size_t bytes, int64_t offset) const {
  auto* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, p + done, bytes - done, offset + static_cast<int64_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("read", path_);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

void File::truncate(int64_t bytes) {
  if (::ftruncate(fd_, bytes) != 0) fail("ftruncate", path_);
}

void File::sync() {
  if (::fsync(fd_) != 0) fail("fsync", path_);
}

void File::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", path_);
}

void sync_dir(const std::string& dir) {
  File d = open_with(dir, O_RDONLY | O_DIRECTORY, "open directory");
  if (::fsync(d.fd()) != 0) fail("fsync directory", dir);
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void rename_durable(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw CheckpointError("rename '" + from + "' -> '" + to + "' failed: " + std::strerror(errno));
  }
  sync_dir(parent_dir(to));
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp-" + std::to_string(make_nonce());
  {
    File f = File::create_new(tmp);
    f.pwrite_all(contents.data(), contents.size(), 0);
    f.sync();
    f.close();
  }
  rename_durable(tmp, path);
}

std::string read_file(const std::string& path) {
  File f = File::open_read(path);
  std::string s(static_cast<size_t>(f.size()), '\0');
  s.resize(f.pread_some(s.data(), s.size(), 0));
  return s;
}

uint64_t make_nonce() {
  static thread_local std::mt19937_64 gen(std::random_device{}() ^
                                          (static_cast<uint64_t>(::getpid()) << 32) ^
                                          static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return gen() & 0xffffffffffffull;  // 12 hex digits are plenty and keep names short
}

}  // namespace fsdp::runtime::checkpoint
