// fsdp-store: a standalone rendezvous store for jobs whose rank 0 should not serve it (FSDP_STORE_EXTERNAL=1).
//
//   fsdp-store --port 29500 [--host 0.0.0.0]
//
// Prints "fsdp-store: serving on HOST:PORT" once it listens (with --port 0, the port the kernel chose)
// and runs until SIGTERM or SIGINT.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "launch/store.h"

namespace {

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "fsdp-store: %s\n", error.c_str());
  std::fprintf(stderr, "usage: fsdp-store --port P [--host H]   (P 0: a free port; H default 0.0.0.0)\n");
  std::exit(error.empty() ? 0 : 2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "0.0.0.0";
  long port = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(k + " needs a value");
      return argv[++i];
    };
    if (k == "--port") {
      const std::string text = value();
      char* end = nullptr;
      port = std::strtol(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || port < 0 || port > 65535) usage("--port wants 0..65535, got '" + text + "'");
    } else if (k == "--host") {
      host = value();
    } else if (k == "-h" || k == "--help") {
      usage("");
    } else {
      usage("unknown option '" + k + "'");
    }
  }
  if (port < 0) usage("--port P is required");

  // Block the stop signals before the server thread starts, so it inherits the mask and sigwait()
  // below is the only place they arrive.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  try {
    fsdp::launch::StoreServer server(host, static_cast<uint16_t>(port));
    std::printf("fsdp-store: serving on %s\n", server.address().c_str());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    std::printf("fsdp-store: got signal %d, stopping\n", sig);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-store: %s\n", e.what());
    return 1;
  }
  return 0;
}
