#include "launch/fork_ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <thread>

namespace fsdp::launch {

std::vector<int> fork_ranks(int n, std::chrono::milliseconds deadline, const std::function<int(int rank)>& body) {
  std::fflush(stdout);  // or the children print the parent's buffered output again
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 99;
      try {
        rc = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(n), -1);
  const auto end = std::chrono::steady_clock::now() + deadline;
  int left = n;
  while (left > 0 && std::chrono::steady_clock::now() < end) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] == 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[r] = 0;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < n; ++r) {
    if (pids[r] == 0) continue;
    ::kill(pids[r], SIGKILL);
    ::waitpid(pids[r], nullptr, 0);
  }
  return codes;
}

}  // namespace fsdp::launch
