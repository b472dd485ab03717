#include "launch/tools/fsdp_run_output.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace fsdp::launch::run {
namespace {

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // our own output is gone (closed pipe): nothing better to do than drop it
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

void emit(Stream& s, bool flush_partial) {
  constexpr size_t kMaxLine = 64 << 10;
  size_t start = 0;
  for (;;) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) {
      if (s.pending.size() - start >= kMaxLine || (flush_partial && s.pending.size() > start)) {
        nl = s.pending.size();
      } else {
        break;
      }
    }
    std::string line = s.prefix;
    line.append(s.pending, start, nl - start);
    line.push_back('\n');
    write_all(s.out_fd, line.data(), line.size());
    start = std::min(nl + 1, s.pending.size());
  }
  s.pending.erase(0, start);
}

bool pump(Stream& s) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.pending.append(buf, static_cast<size_t>(n));
      emit(s, false);
      if (static_cast<size_t>(n) < sizeof(buf)) return true;
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && errno == EAGAIN) return true;
    emit(s, true);
    ::close(s.fd);
    s.fd = -1;
    return false;
  }
}

}  // namespace fsdp::launch::run
