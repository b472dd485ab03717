// fsdp-ckpt: look into distributed checkpoints without a job (docs/checkpoints.md).
//
//   fsdp-ckpt inspect DIR   metadata: step, degrees, parameters and shapes, files, training-state keys
//   fsdp-ckpt verify DIR    re-reads every chunk and checks its CRC32C; exit 1 naming each bad file
//
// DIR is a step directory or a checkpoint folder (then its latest committed step).
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/checkpoint/inspect.h"

namespace ck = fsdp::runtime::checkpoint;

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: fsdp-ckpt inspect DIR\n"
               "       fsdp-ckpt verify DIR\n"
               "DIR: a checkpoint step directory (step-<N>) or a checkpoint folder (uses its latest step)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return usage();
  const std::string cmd = argv[1];
  try {
    const std::string dir = ck::resolve_step_dir(argv[2]);
    if (cmd == "inspect") {
      std::fputs(ck::describe(ck::read_metadata(dir), dir).c_str(), stdout);
      return 0;
    }
    if (cmd == "verify") {
      const ck::VerifyReport r = ck::verify_checkpoint(dir);
      for (const auto& e : r.errors) std::fprintf(stderr, "error: %s\n", e.c_str());
      if (!r.ok()) {
        std::fprintf(stderr, "FAILED: %zu problem(s) in %s\n", r.errors.size(), dir.c_str());
        return 1;
      }
      std::printf("OK: %s, %lld files, %lld chunks, %lld bytes verified\n", dir.c_str(), static_cast<long long>(r.files),
                  static_cast<long long>(r.chunks), static_cast<long long>(r.bytes));
      return 0;
    }
    std::fprintf(stderr, "unknown command '%s'\n", cmd.c_str());
    return usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
