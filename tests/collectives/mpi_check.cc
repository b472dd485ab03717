// fsdp-mpi-check: one rank of an mpirun job over the MPI transport, no rendezvous store involved.
//
//   mpirun -np 4 fsdp-mpi-check suite      every collective against the reference, with MPI messages of
//                                           at most 40000 bytes, so every large payload travels split
//   mpirun -np 2 fsdp-mpi-check mismatch   size mismatches at the transport, self-sends, reuse after
//   mpirun -np 2 fsdp-mpi-check kill       rank 1 dies after a barrier; rank 0 must name it
//
// Prints "fsdp-mpi-check OK: rank R/N mode M" and exits 0, or says what failed and exits non-zero.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/core/errors.h"
#include "collectives/transports/mpi.h"
#include "tests/collectives/test_support.h"

namespace {

using namespace std::chrono_literals;

int expect_in(const std::string& what, const std::string& needle) {
  if (what.find(needle) != std::string::npos) return 0;
  std::fprintf(stderr, "expected '%s' in: %s\n", needle.c_str(), what.c_str());
  return 3;
}

int mismatch(fsdp::Transport& t) {
  const int rank = t.rank();
  auto wait = [&](const fsdp::RequestPtr& r) {
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (r->pending() && std::chrono::steady_clock::now() < end) t.progress();
  };
  int bad = 0;
  std::vector<float> a(1000, 1.5f), b(1000, 0.f);
  auto s = t.isend(rank, fsdp::Tag{9, 1}, a.data(), a.size() * sizeof(float));
  auto v = t.irecv(rank, fsdp::Tag{9, 1}, b.data(), b.size() * sizeof(float));
  bad += !(s->done() && v->done() && b[999] == 1.5f);
  if (t.size() < 2 || rank > 1) return bad;
  std::vector<std::byte> big(2 << 20);
  const int other = 1 - rank;
  auto r = rank == 0 ? t.isend(other, fsdp::Tag{9, 2}, big.data(), 1 << 20)
                     : t.irecv(other, fsdp::Tag{9, 2}, big.data(), 2 << 20);
  wait(r);
  if (!r->failed()) return 2;
  bad += expect_in(r->error(), "message size mismatch: rank 0 sent 1048576 bytes, rank 1 expected 2097152");
  auto e = rank == 0 ? t.isend(other, fsdp::Tag{9, 3}, big.data(), 8) : t.irecv(other, fsdp::Tag{9, 3}, big.data(), 16);
  wait(e);
  if (rank == 1) bad += e->failed() ? expect_in(e->error(), "rank 0 sent 8 bytes, rank 1 expected 16") : 4;
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(rank == 0 ? i * 7 + 1 : 0);
  auto ok = rank == 0 ? t.isend(other, fsdp::Tag{9, 4}, big.data(), big.size())
                      : t.irecv(other, fsdp::Tag{9, 4}, big.data(), big.size());
  wait(ok);
  bad += ok->done() ? 0 : 5;
  if (rank == 1) {
    for (size_t i = 0; i < big.size(); ++i) {
      if (big[i] != static_cast<std::byte>(i * 7 + 1)) return 6;
    }
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "suite";
  if (mode != "suite" && mode != "mismatch" && mode != "kill") {
    std::fprintf(stderr, "usage: fsdp-mpi-check [suite|mismatch|kill]\n");
    return 2;
  }
  int rank = -1, n = 0, rc = 1;
  try {
    fsdp::MpiOptions options;
    options.max_message_bytes = 40000;
    auto transport = fsdp::make_mpi_transport(-1, -1, 20s, options);
    rank = transport->rank();
    n = transport->size();
    if (mode == "mismatch") {
      rc = mismatch(*transport);
    } else {
      fsdp::CommOptions o;
      o.timeout = 20s;
      o.chunk_bytes = 64 * 1024;
      auto comm = fsdp::Communicator::create(transport, o);
      rc = mode == "suite" ? fsdp::testing::run_collectives_suite(*comm, rank, n)
                           : fsdp::testing::killed_peer_scenario(*comm);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-mpi-check: rank %d FAILED: %s\n", rank, e.what());
    return 1;
  }
  if (rc == 0) {
    std::printf("fsdp-mpi-check OK: rank %d/%d mode %s\n", rank, n, mode.c_str());
  } else {
    std::fprintf(stderr, "fsdp-mpi-check: rank %d/%d mode %s FAILED with %d\n", rank, n, mode.c_str(), rc);
  }
  std::fflush(stdout);
  return rc;
}
