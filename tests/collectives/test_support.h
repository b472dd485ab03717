// Test support for the collectives: a pool of in-process ranks that persists across many cases, and
// a naive reference that computes every result element by element in double precision.
#pragma once

#include <barrier>
#include <chrono>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "common/dtype.h"
#include "collectives/types/reduce_op.h"

namespace fsdp::testing {

// The ASan and TSan builds run everything 3-10x slower: sweeps whose width only adds coverage of the
// same code paths take their narrow form there (the normal build runs them whole).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif

// n ranks as threads over the in-process transport, sharing one progress engine. run() hands every
// rank the same function and returns when all finished; the first exception is rethrown.
class InProcJob {
 public:
  explicit InProcJob(int n, CommOptions options = CommOptions());
  ~InProcJob();
  int size() const { return n_; }
  void run(const std::function<void(Communicator&)>& fn);
  Communicator& comm(int r) { return *comms_[r]; }

 private:
  void worker(int r);
  int n_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::thread> threads_;
  std::barrier<> start_;
  std::barrier<> done_;
  const std::function<void(Communicator&)>* fn_ = nullptr;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

// Input values chosen so any summation order is exact: the reference and the ring agree bitwise.
std::vector<std::byte> make_input(DataType t, ReduceKind op, int rank, size_t count, int salt = 0);
// Every element of the reduction of `inputs` over ranks, rounded once to t (partials in f32 for
// 16- and 8-bit floats, as the library does).
std::vector<std::byte> reference_reduce(DataType t, ReduceOp op, const std::vector<std::vector<std::byte>>& inputs,
                                        size_t count);
// Empty when equal; else a message naming the first differing element.
std::string compare(const std::byte* got, const std::byte* want, size_t count, DataType t, size_t offset_elems = 0);

// One rank's share of a small suite for real multi-process transports: every collective, fp32, bf16
// and int32, counts 1, 1000 and 300000 (140000 under a sanitizer; single- and multi-chunk), each
// checked against the reference.
// Returns 0 when every result matched, else 1 (and prints each mismatch to stderr).
int run_collectives_suite(Communicator& comm, int rank, int n);

// Forks n ranks running body(rank) (its return value is the exit code) and returns their exit codes;
// a rank still running at the deadline is killed and reported as -1.
std::vector<int> run_processes(int n, std::chrono::seconds deadline, const std::function<int(int)>& body);
// The body of every process transport's kill test, run by each rank after joining: rank 1 dies
// (SIGKILL) after a barrier; rank 0's next `collective` ("all_gather" or "all_to_all") must fail with
// PeerLostError naming rank 0, peer 1 and the collective within 5 s. Returns rank 0's exit code (0
// when all of that held).
int killed_peer_scenario(Communicator& comm, const std::string& collective = "all_gather");

// The body of every process transport's size-mismatch test, run by ranks 0 and 1 over the bare
// transport: a self-send, a 1 MiB send into a 2 MiB receive (both sides must fail naming both ranks
// and sizes), an 8-byte send into a 16-byte receive (the receiver must fail), then a well-formed 2 MiB
// message that must arrive intact. Returns 0 when all of that held.
int size_mismatch_scenario(Transport& transport);

// Whether `what` (an error's text) contains every needle; prints the first one missing to stderr (for
// checks inside forked ranks, which report through their exit code).
bool mentions_all(const std::string& what, std::initializer_list<std::string> needles);

// A job name no other test process on this host is using (pid and a counter).
std::string unique_job_name(const std::string& prefix);
// Mappings in this process of memfds whose name starts with `name` (/proc/self/maps "memfd:<name>...").
int memfd_mappings(const std::string& name);
// What this test process's jobs named by unique_job_name(prefix) left in /dev/shm (the shm transport's
// "fsdp-<job>" segments). Other processes' entries are not this test's business: tests run in parallel.
std::set<std::string> left_in_dev_shm(const std::string& prefix);

// `command` run by sh with stderr joined to stdout: its exit code (128 + signal for a signal), its
// output and how long it took. For tests that start launchers (fsdp-run, mpirun) as processes.
struct ShellResult {
  int code = -1;
  std::string output;
  double seconds = 0;
};
ShellResult run_shell(const std::string& command);
// "mpirun" as tests run it: as root (Open MPI refuses without being told) and with more ranks than cores.
inline constexpr const char* kMpirunForTests =
    "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --allow-run-as-root --oversubscribe";

std::vector<DataType> all_data_types();
std::vector<ReduceOp> all_reduce_ops();

}  // namespace fsdp::testing
