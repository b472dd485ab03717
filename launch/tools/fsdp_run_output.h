// fsdp-run's output tagging: each rank's stdout and stderr read from a pipe and written out line by
// line with "[rank R] " in front, so lines of different ranks never mix.
#pragma once

#include <string>

namespace fsdp::launch::run {

// One child's output stream (stdout or stderr): bytes not yet ending in a newline wait in `pending`.
struct Stream {
  int fd = -1;
  int out_fd = 1;
  std::string prefix;
  std::string pending;
};

// Emits every complete line with its prefix, one write per line. A line longer than 64 KiB is cut
// rather than held; flush_partial also emits what follows the last newline.
void emit(Stream& s, bool flush_partial);

// Reads what is there (s.fd is non-blocking) and emits the complete lines; false at end of file,
// where the rest is emitted and s.fd closed.
bool pump(Stream& s);

}  // namespace fsdp::launch::run
