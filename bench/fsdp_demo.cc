// fsdp-demo: the main job until the trainer lands. Forks N local ranks (default 2) that join over the
// shared-memory transport (or TCP on 127.0.0.1), run all-gather and reduce-scatter (fp32 sum) over a range of sizes, check
// every result, and print a table in nccl-tests units. Rank 0 prints; any wrong value or error makes
// the exit status non-zero.
//
//   fsdp-demo [--ranks N] [--max-bytes B] [--iters K] [--transport shm|tcp] [--tcp-connections C]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/transports/shm.h"
#include "collectives/transports/tcp.h"

namespace {

struct Args {
  int ranks = 2;
  size_t max_bytes = 64ull << 20;
  int iters = 5;
  std::string transport = "shm";
  int tcp_connections = 1;  // TcpOptions::connections_per_peer
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fsdp-demo: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--ranks") {
      a.ranks = std::atoi(value());
    } else if (k == "--max-bytes") {
      a.max_bytes = std::strtoull(value(), nullptr, 10);
    } else if (k == "--iters") {
      a.iters = std::atoi(value());
    } else if (k == "--transport") {
      a.transport = value();
    } else if (k == "--tcp-connections") {
      a.tcp_connections = std::atoi(value());
    } else {
      std::fprintf(stderr,
                   "usage: fsdp-demo [--ranks N] [--max-bytes B] [--iters K] [--transport shm|tcp] "
                   "[--tcp-connections C]\n");
      std::exit(k == "--help" || k == "-h" ? 0 : 2);
    }
  }
  if (a.transport != "shm" && a.transport != "tcp") {
    std::fprintf(stderr, "fsdp-demo: --transport must be shm or tcp\n");
    std::exit(2);
  }
  if (a.ranks < 1 || a.ranks > 64 || a.iters < 1 || a.max_bytes < 1024) {
    std::fprintf(stderr, "fsdp-demo: need 1 <= --ranks <= 64, --iters >= 1, --max-bytes >= 1024\n");
    std::exit(2);
  }
  return a;
}

// Median seconds of `iters` timed runs of fn, after one warm-up, with a barrier before each.
template <typename Fn>
double median_seconds(fsdp::Communicator& comm, int iters, Fn fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    comm.barrier().wait();
    auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// TCP listeners of every rank, bound on 127.0.0.1 before forking: the address list a rendezvous
// store would otherwise gather.
struct TcpJob {
  std::vector<fsdp::TcpListener> listeners;
  std::vector<fsdp::TcpEndpoint> peers;
};

std::shared_ptr<fsdp::Transport> make_transport(const Args& a, const std::string& job, TcpJob& tcp, int rank) {
  if (a.transport == "shm") return fsdp::make_shm_transport(job, rank, a.ranks, std::chrono::seconds(30));
  fsdp::TcpOptions options;
  options.connections_per_peer = a.tcp_connections;
  return fsdp::make_tcp_transport(rank, a.ranks, std::move(tcp.listeners[rank]), tcp.peers, std::chrono::seconds(30),
                                  options);
}

int run_rank(const Args& a, const std::string& job, TcpJob& tcp, int rank) {
  auto transport = make_transport(a, job, tcp, rank);
  tcp.listeners.clear();  // the other ranks' listeners belong to their processes
  auto comm = fsdp::Communicator::create(transport);
  const int n = comm->size();
  if (rank == 0) {
    const char* copy = std::getenv("FSDP_SHM_COPY");
    if (a.transport == "tcp") {
      std::printf("# fsdp-demo: %d ranks over tcp on 127.0.0.1 (%d connections per peer), fp32 sum, median of %d "
                  "iterations\n", n, a.tcp_connections, a.iters);
    } else {
      std::printf("# fsdp-demo: %d ranks over shared memory (FSDP_SHM_COPY=%s), fp32 sum, median of %d iterations\n",
                  n, copy && *copy ? copy : "staging", a.iters);
    }
    std::printf("# busbw = algbw * (n-1)/n\n#\n");
    std::printf("# %12s %12s  %15s %9s %9s %7s\n", "size (B)", "count", "collective", "time (us)", "busbw GB/s",
                "#wrong");
  }
  int wrong_total = 0;
  for (size_t bytes = 1024; bytes <= a.max_bytes; bytes *= 8) {
    const size_t total = bytes / sizeof(float) / n * n;  // divisible by n
    const size_t block = total / n;
    std::vector<float> full(total), shard(block), input(total);
    for (size_t i = 0; i < block; ++i) shard[i] = static_cast<float>((rank * 131 + i) % 1000);
    for (size_t i = 0; i < total; ++i) input[i] = static_cast<float>((rank + i) % 17);

    double ag = median_seconds(*comm, a.iters, [&] { comm->all_gather(shard.data(), full.data(), block, fsdp::DataType::kFloat32).wait(); });
    long wrong = 0;
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < block; ++i) wrong += full[r * block + i] != static_cast<float>((r * 131 + i) % 1000);
    }
    // The single-copy bound: what one memcpy of this rank's incoming bytes costs, same process, same run.
    std::vector<float> copy_src(total - block), copy_dst(total - block);
    double mc = median_seconds(*comm, a.iters, [&] {
      std::memcpy(copy_dst.data(), copy_src.data(), copy_src.size() * sizeof(float));
    });
    double rs = median_seconds(*comm, a.iters, [&] {
      comm->reduce_scatter(input.data(), shard.data(), block, fsdp::DataType::kFloat32, fsdp::ReduceOp::sum()).wait();
    });
    long wrong_rs = 0;
    for (size_t i = 0; i < block; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += static_cast<float>((r + rank * block + i) % 17);
      wrong_rs += shard[i] != want;
    }
    const double sz = static_cast<double>(total * sizeof(float));
    const double factor = n > 1 ? static_cast<double>(n - 1) / n : 1.0;
    // Every rank's count of wrong values reaches rank 0 through a sum all-reduce.
    int64_t counts[2] = {wrong, wrong_rs};
    comm->all_reduce(counts, counts, 2, fsdp::DataType::kInt64, fsdp::ReduceOp::sum()).wait();
    wrong_total += static_cast<int>(counts[0] + counts[1]);
    if (rank == 0) {
      std::printf("  %12zu %12zu  %15s %9.1f %9.2f %7lld\n", total * sizeof(float), total, "all_gather", ag * 1e6,
                  sz / ag / 1e9 * factor, static_cast<long long>(counts[0]));
      std::printf("  %12zu %12zu  %15s %9.1f %9.2f %7lld\n", total * sizeof(float), total, "reduce_scatter", rs * 1e6,
                  sz / rs / 1e9 * factor, static_cast<long long>(counts[1]));
      std::printf("  %12zu %12zu  %15s %9.1f %9.2f %7s\n", total * sizeof(float), total, "memcpy bound", mc * 1e6,
                  sz / mc / 1e9 * factor, "-");
    }
  }
  if (rank == 0) std::printf("# %s: %d wrong values\n", wrong_total == 0 ? "OK" : "FAILED", wrong_total);
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const std::string job = "demo-" + std::to_string(::getpid());
  TcpJob tcp;
  if (a.transport == "tcp") {
    for (int r = 0; r < a.ranks; ++r) {
      tcp.listeners.push_back(fsdp::TcpListener::bind("127.0.0.1"));
      tcp.peers.push_back(tcp.listeners.back().endpoint());
    }
  }
  std::vector<pid_t> children;
  for (int r = 1; r < a.ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = run_rank(a, job, tcp, r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fsdp-demo rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  int rc = 1;
  try {
    rc = run_rank(a, job, tcp, 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-demo rank 0: %s\n", e.what());
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}
