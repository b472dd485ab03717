// fsdp-store: a standalone rendezvous store for jobs whose rank 0 should not serve it (FSDP_STORE_EXTERNAL=1).
//
//   fsdp-store --port 29500 [--host ADDRESS | --interface NAME]
//
// Listens on the loopback unless told an address or a network interface (never every interface by
// default). Clients must prove the job secret (FSDP_JOB_SECRET or FSDP_JOB_SECRET_FILE, the same the
// ranks get); on anything but the loopback it refuses to start without one. Prints "fsdp-store:
// serving on HOST:PORT" once it listens (with --port 0, the port the kernel chose) and runs until
// SIGTERM or SIGINT.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/job_secret.h"
#include "launch/host_address.h"
#include "launch/store.h"

namespace {

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "fsdp-store: %s\n", error.c_str());
  std::fprintf(stderr,
               "usage: fsdp-store --port P [--host ADDRESS | --interface NAME]\n"
               "  P 0: a free port; ADDRESS default 127.0.0.1; NAME: a network interface (eth0), its IPv4 address\n"
               "  clients prove FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE; required unless on the loopback\n");
  std::exit(error.empty() ? 0 : 2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
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
    } else if (k == "--interface") {
      const std::string name = value();
      host = fsdp::launch::interface_address(name);
      if (host.empty()) usage("interface '" + name + "' does not exist or has no IPv4 address");
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
    const fsdp::JobSecret secret = fsdp::job_secret_from_env();
    if (secret.empty() && !fsdp::launch::is_loopback(host)) {
      std::fprintf(stderr,
                   "fsdp-store: refusing to serve %s without a job secret: anyone who reaches it could rewrite the "
                   "job's keys. Set FSDP_JOB_SECRET (openssl rand -hex 32) or FSDP_JOB_SECRET_FILE here and on "
                   "every rank\n",
                   host.c_str());
      return 2;
    }
    fsdp::launch::StoreServerOptions options = fsdp::launch::StoreServerOptions::from_env();
    options.secret = secret.key;
    fsdp::launch::StoreServer server(host, static_cast<uint16_t>(port), options);
    std::printf("fsdp-store: serving on %s\n", server.address().c_str());
    std::fflush(stdout);
    if (secret.empty()) {
      std::fprintf(stderr, "fsdp-store: note: no job secret (FSDP_JOB_SECRET / FSDP_JOB_SECRET_FILE): any local "
                           "process may use this store\n");
    }
    int sig = 0;
    sigwait(&stop, &sig);
    std::printf("fsdp-store: got signal %d, stopping\n", sig);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-store: %s\n", e.what());
    return 1;
  }
  return 0;
}
