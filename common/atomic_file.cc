#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace fsdp {

std::string write_file_atomically(const std::string& path, std::string_view text, unsigned mode) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  auto failed = [&tmp](const char* what, const std::string& name) {
    const std::string error = std::string(what) + " " + name + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return error;
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return std::string("create ") + tmp + ": " + std::strerror(errno);
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      const int err = errno;
      ::close(fd);
      errno = err;
      return failed("write", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return failed("close", tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return failed("rename to", path);
  return "";
}

}  // namespace fsdp
