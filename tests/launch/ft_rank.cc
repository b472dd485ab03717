// A rank of a fault-tolerant job reduced to its store traffic, for fsdp-run's FT mode tests: rank 0
// enables fault tolerance ("<job>ft/enabled", as fsdp-train does at start-up), then one rank dies or
// freezes, and the others agree on the survivors (launch/failure_agreement.h) through the store
// fsdp-run serves, reading the dead rank's exit from fsdp-run's "ft/exited/<rank>".
//
//   fsdp-ft-rank [--die-rank R] [--freeze-rank R] [--fail-rank R] [--no-ft]
//     --fail-rank: that survivor exits 3 after the agreement; --no-ft: nobody enables it
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "launch/bootstrap.h"
#include "launch/failure_agreement.h"
#include "launch/store.h"
#include "launch/world.h"

int main(int argc, char** argv) {
  int die = -1, freeze = -1, fail = -1;
  bool ft = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-ft") {
      ft = false;
    } else if (i + 1 < argc && (arg == "--die-rank" || arg == "--freeze-rank" || arg == "--fail-rank")) {
      (arg == "--die-rank" ? die : arg == "--freeze-rank" ? freeze : fail) = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "fsdp-ft-rank: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  const fsdp::launch::ProcessEnv env = fsdp::launch::detect_process_env();
  fsdp::launch::StoreClientOptions options;
  options.rank = env.rank;
  fsdp::launch::StoreClient store(env.master_addr, env.master_port, options);
  const std::string job = fsdp::launch::job_key_prefix();
  if (ft && env.rank == 0) store.set(job + "ft/enabled", "1");
  if (ft) store.wait({job + "ft/enabled"});  // no rank dies before fault tolerance is on
  if (env.rank == die) ::raise(SIGKILL);
  if (env.rank == freeze) ::raise(SIGSTOP);
  try {
    const auto d = fsdp::launch::agree_on_failure(
        store, job, 1, env.rank, env.world_size, 0,
        [&] { return freeze >= 0 ? std::vector<int>{freeze} : std::vector<int>{}; },  // the heartbeat's word
        std::chrono::seconds(20));
    std::printf("decision %s\n", fsdp::launch::encode_decision(d).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-ft-rank: %s\n", e.what());
    return 1;
  }
  return env.rank == fail ? 3 : 0;
}
