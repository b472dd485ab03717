// fsdp-world-check: joins the job its launcher started (fsdp-run, mpirun, torchrun-style variables)
// with connect_world and checks every collective against the naive reference, or, with --die-rank,
// kills one rank with SIGKILL in the middle of a long all-reduce loop so the survivors must report
// PeerLostError naming it; with --freeze-rank, stops one rank with SIGSTOP in the same loop on a
// communicator split from the world's (as the trainer's are), so the survivors time out on it and
// must tear down without waiting on it again.
//
//   fsdp-run --nproc 4 -- fsdp-world-check
//   mpirun -np 4 fsdp-world-check
//   fsdp-run --nproc 3 -- fsdp-world-check --die-rank 1 --die-after 3
//   FSDP_TIMEOUT_SEC=2 fsdp-run --nproc 3 -- fsdp-world-check --freeze-rank 1
//
// Prints one line "fsdp-world-check OK: ..." and exits 0, or the error and exits 1.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "collectives/types/errors.h"
#include "launch/world.h"
#include "tests/collectives/test_support.h"

namespace {

struct Args {
  int die_rank = -1;
  int freeze_rank = -1;
  int die_after = 3;
  int iters = 100000;
  size_t loop_count = 1 << 16;  // floats per all-reduce of the --die-rank loop
};

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(stderr, "fsdp-world-check: %s\nusage: fsdp-world-check [--die-rank R | --freeze-rank R] [--die-after N] [--iters K]\n",
               error.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage(k + " needs a value (or is unknown)");
    const int v = std::atoi(argv[++i]);
    if (k == "--die-rank") {
      a.die_rank = v;
    } else if (k == "--freeze-rank") {
      a.freeze_rank = v;
    } else if (k == "--die-after") {
      a.die_after = v;
    } else if (k == "--iters") {
      a.iters = v;
    } else {
      usage("unknown option '" + k + "'");
    }
  }
  return a;
}

const char* kind_of(const std::exception& e) {
  if (dynamic_cast<const fsdp::PeerLostError*>(&e)) return "PeerLostError";
  if (dynamic_cast<const fsdp::TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const fsdp::AbortedError*>(&e)) return "AbortedError";
  if (dynamic_cast<const fsdp::CommError*>(&e)) return "CommError";
  if (dynamic_cast<const fsdp::InvalidArgument*>(&e)) return "InvalidArgument";
  return "error";
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  int rank = -1;
  // Outside the try: the error is printed before the world is torn down, not after.
  std::optional<fsdp::launch::World> joined;
  try {
    const fsdp::launch::ProcessEnv env = fsdp::launch::detect_process_env();
    rank = env.rank;
    joined.emplace(fsdp::launch::connect_world(env));
    fsdp::launch::World& world = *joined;
    fsdp::Communicator& comm = *world.comm;
    const int n = comm.size();

    if (a.die_rank >= 0 || a.freeze_rank >= 0) {
      // Frozen: on a split communicator, so the world's own stays healthy and only the transport
      // knows a collective failed.
      std::unique_ptr<fsdp::Communicator> split = a.freeze_rank >= 0 ? comm.split(0, rank) : nullptr;
      fsdp::Communicator& loop_comm = split ? *split : comm;
      std::vector<float> buf(a.loop_count, 1.0f);
      for (int i = 0; i < a.iters; ++i) {
        fsdp::Work w =
            loop_comm.all_reduce(buf.data(), buf.data(), buf.size(), fsdp::DataType::kFloat32, fsdp::ReduceOp::sum());
        // Posted, so the peers are inside this all-reduce waiting on us when we vanish or freeze.
        if (rank == a.die_rank && i == a.die_after) ::raise(SIGKILL);
        if (rank == a.freeze_rank && i == a.die_after) ::raise(SIGSTOP);
        w.wait();
        if (i % 4 == 3) std::fill(buf.begin(), buf.end(), 1.0f);  // keep the sums finite
      }
      std::fprintf(stderr, "fsdp-world-check: rank %d: all %d iterations passed although rank %d should have failed\n",
                   rank, a.iters, a.die_rank >= 0 ? a.die_rank : a.freeze_rank);
      return 3;
    }

    if (fsdp::testing::run_collectives_suite(comm, comm.rank(), n) != 0) {
      std::fprintf(stderr, "fsdp-world-check: rank %d: results differ from the reference\n", rank);
      return 1;
    }
    const auto& t = world.topology;
    std::printf("fsdp-world-check OK: rank %d/%d (from %s) host %d/%d local %d/%d transport %s job %s "
                "large all_gather %s\n",
                comm.rank(), n, env.source.c_str(), t.host_index, t.host_count, t.local_rank, t.local_size,
                world.transport_name.c_str(), world.job_id.c_str(),
                comm.algorithm_for(fsdp::CollectiveKind::kAllGather, 1 << 24).c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-world-check: rank %d FAILED: %s: %s\n", rank, kind_of(e), e.what());
    return 1;
  }
  return 0;
}
