// Real multi-process jobs: fsdp-run and mpirun starting fsdp-world-check over shm, tcp, ucx (with
// UCX_TLS=tcp and with shared memory) and mpi, a rank killed with SIGKILL mid-collective, exit codes,
// output tagging, signal forwarding, rendezvous timeouts and an external fsdp-store. Tests that need
// mpirun skip when it is not installed.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>

#include "launch/store.h"
#include "tests/collectives/test_support.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

const std::string kRun = FSDP_RUN_BIN;
const std::string kStore = FSDP_STORE_BIN;
const std::string kCheck = FSDP_WORLD_CHECK_BIN;
// Open MPI refuses root without its variables; --oversubscribe lets 4 ranks share 2 cores.
const std::string kMpirun = fsdp::testing::kMpirunForTests;
// Variables a surrounding launcher may have set: each test starts from none of them.
const std::string kClean =
    "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "
    "-u FSDP_MASTER_ADDR -u FSDP_MASTER_PORT -u FSDP_STORE_EXTERNAL -u FSDP_TRANSPORT -u FSDP_JOB_SECRET "
    "-u FSDP_JOB_SECRET_FILE "
    "-u OMP_NUM_THREADS OPENBLAS_NUM_THREADS=1 ";  // a chosen thread count: fsdp-run says nothing of threads
// How long past its collective timeout a failed job may take to end: the 5 s the contract promises.
// Under a sanitizer the ranks start and unwind 3-10x slower, so there the bound only proves "no hang".
constexpr double kEndSlackSec = fsdp::testing::kUnderSanitizer ? 30 : 5;

using Result = fsdp::testing::ShellResult;  // exit status (128+signal for a signal), output, seconds
Result sh(const std::string& command) { return fsdp::testing::run_shell(command); }

int count(const std::string& text, const std::string& needle) {
  int c = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++c;
  return c;
}

bool have_mpirun() { return sh("command -v mpirun").code == 0; }

// A transport parameter: "shm", "tcp", "mpi", or "ucx_<set>" for FSDP_TRANSPORT=ucx with UCX_TLS=tcp
// ("ucx_tcp") or a shared-memory set ("ucx_sm": sm,self).
std::string transport_of(const std::string& param) { return param.substr(0, param.find('_')); }
std::string transport_env(const std::string& param) {
  if (param == "ucx_tcp") return "FSDP_TRANSPORT=ucx UCX_TLS=tcp ";
  if (param == "ucx_sm") return "FSDP_TRANSPORT=ucx UCX_TLS=sm,self ";
  // Open MPI's own components leak at exit, which LeakSanitizer would count as a failure of the ranks.
  if (param == "mpi") return "FSDP_TRANSPORT=mpi ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 ";
  return "FSDP_TRANSPORT=" + param + " ";
}
// What mpirun must pass on for it.
std::string mpirun_exports(const std::string& param) {
  return transport_of(param) == "ucx" ? " -x FSDP_TRANSPORT -x UCX_TLS" : " -x FSDP_TRANSPORT";
}

uint16_t free_port() {
  fsdp::launch::StoreServer probe("127.0.0.1", 0);  // bound then released: free a moment ago
  return probe.port();
}

// A process in the background with its stdout and stderr on a pipe.
struct Background {
  pid_t pid = -1;
  FILE* out = nullptr;

  explicit Background(const std::vector<std::string>& argv) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    EXPECT_EQ(::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out = ::fdopen(fds[0], "r");
  }
  std::string line() {
    char buf[1024];
    return std::fgets(buf, sizeof(buf), out) ? std::string(buf) : std::string();
  }
  // Exit code (128+signal for a signal) after sending `sig`.
  int stop(int sig) {
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::fclose(out);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Background() {
    if (pid > 0) stop(SIGKILL);
  }
};

// --- fsdp-run and mpirun running every collective --------------------------------------------------

class FsdpRunWorld : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(FsdpRunWorld, EveryCollective) {
  const auto& [param, n] = GetParam();
  const Result r = sh(kClean + transport_env(param) + kRun + " --nproc " + std::to_string(n) + " -- " + kCheck);
  ASSERT_EQ(r.code, 0) << r.output;
  for (int k = 0; k < n; ++k) {
    const std::string ok = "[rank " + std::to_string(k) + "] fsdp-world-check OK: rank " + std::to_string(k) + "/" +
                           std::to_string(n) + " (from torchrun) host 0/1 local " + std::to_string(k) + "/" +
                           std::to_string(n) + " transport " + transport_of(param);
    EXPECT_EQ(count(r.output, ok), 1) << ok << "\n" << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, FsdpRunWorld,
                         ::testing::Combine(::testing::Values("shm", "tcp", "ucx_tcp", "ucx_sm"),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

TEST(FsdpRun, RankZeroServesTheStoreWithNoStore) {
  const Result r = sh(kClean + kRun + " --no-store --nproc 2 -- " + kCheck);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-world-check OK"), 2) << r.output;
}

class MpirunWorld : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// No MASTER_*: the ranks find rank 0's store through a file named after the Open MPI job.
TEST_P(MpirunWorld, EveryCollective) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  const auto& [param, n] = GetParam();
  const Result r = sh(kClean + transport_env(param) + kMpirun + mpirun_exports(param) + " -np " + std::to_string(n) +
                      " " + kCheck);
  ASSERT_EQ(r.code, 0) << r.output;
  for (int k = 0; k < n; ++k) {
    const std::string ok = "fsdp-world-check OK: rank " + std::to_string(k) + "/" + std::to_string(n) +
                           " (from mpirun) host 0/1 local " + std::to_string(k) + "/" + std::to_string(n) +
                           " transport " + transport_of(param);
    EXPECT_EQ(count(r.output, ok), 1) << ok << "\n" << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, MpirunWorld,
                         ::testing::Combine(::testing::Values("shm", "tcp", "mpi", "ucx_tcp", "ucx_sm"),
                                            ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

TEST(Mpirun, WithMasterAddrAndPort) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed";
  const std::string port = std::to_string(free_port());
  const Result r = sh(kClean + "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " + kMpirun +
                      " -x MASTER_ADDR -x MASTER_PORT -np 3 " + kCheck);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-world-check OK"), 3) << r.output;
}

// --- A rank killed mid-collective ------------------------------------------------------------------

// Each survivor's line names the rank that died, as the peer it waited on or as "also lost".
void expect_survivors_name_rank1(const std::string& output, const std::string& line_prefix_fmt) {
  for (int survivor : {0, 2}) {
    std::string prefix = line_prefix_fmt;
    const auto at = prefix.find("%d");
    if (at != std::string::npos) prefix.replace(at, 2, std::to_string(survivor));
    const std::regex line("(^|\n)" + std::regex_replace(prefix, std::regex(R"([\[\]])"), R"(\$&)") +
                          "fsdp-world-check: rank " + std::to_string(survivor) +
                          " FAILED: PeerLostError: [^\n]*(peer 1,|also lost: rank 1 )");
    EXPECT_TRUE(std::regex_search(output, line)) << "survivor " << survivor << ":\n" << output;
  }
}

class KillUnderFsdpRun : public ::testing::TestWithParam<std::string> {};

// FSDP_RUN_TERM_DELAY_SEC=10: a survivor waiting on the other survivor (the collectives' fingerprint
// exchange) sees rank 1 lost in its all-peer check, ~1 s after the kill, which raced fsdp-run's SIGTERM
// at its default 1 s; the delay costs nothing when every rank fails on its own.
TEST_P(KillUnderFsdpRun, SurvivorsNameTheLostPeer) {
  const Result r = sh(kClean + "FSDP_TIMEOUT_SEC=5 FSDP_RUN_TERM_DELAY_SEC=10 " + transport_env(GetParam()) + kRun +
                      " --nproc 3 -- " + kCheck + " --die-rank 1 --die-after 3");
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.output;
  EXPECT_NE(r.output.find("fsdp-run: failed: rank 1 was killed by signal 9 (SIGKILL)"), std::string::npos) << r.output;
  expect_survivors_name_rank1(r.output, "[rank %d] ");
  EXPECT_LT(r.seconds, 5 + kEndSlackSec) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Transports, KillUnderFsdpRun, ::testing::Values("shm", "tcp", "ucx_tcp", "ucx_sm"),
                         [](const auto& info) { return std::string(info.param); });

class KillUnderMpirun : public ::testing::TestWithParam<std::string> {};

// Each rank runs under a small shell that reports its exit status: mpirun itself would kill the
// survivors the moment it sees rank 1 die (and Open MPI 4.1 hangs when told not to), so this is how
// the survivors' own verdicts are observed.
TEST_P(KillUnderMpirun, SurvivorsNameTheLostPeer) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed";
  const Result r = sh(kClean + "FSDP_TIMEOUT_SEC=5 " + transport_env(GetParam()) + kMpirun + " -x FSDP_TIMEOUT_SEC" +
                      mpirun_exports(GetParam()) + " -np 3 sh -c '" + kCheck +
                      " --die-rank 1 --die-after 3; echo \"rank $OMPI_COMM_WORLD_RANK exit $?\"'");
  EXPECT_EQ(count(r.output, "rank 1 exit 137\n"), 1) << r.output;
  EXPECT_EQ(count(r.output, "rank 0 exit 1\n"), 1) << r.output;
  EXPECT_EQ(count(r.output, "rank 2 exit 1\n"), 1) << r.output;
  expect_survivors_name_rank1(r.output, "");
  EXPECT_LT(r.seconds, 5 + kEndSlackSec) << r.output;
}

// Plain mpirun: it notices the signal, ends the job and exits non-zero; nothing hangs.
TEST(KillUnderMpirunDefault, JobEndsNonZero) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed";
  const Result r = sh(kClean + "FSDP_TIMEOUT_SEC=5 " + kMpirun + " -x FSDP_TIMEOUT_SEC -np 3 " + kCheck +
                      " --die-rank 1 --die-after 3");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("exited on signal 9"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 5 + kEndSlackSec) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Transports, KillUnderMpirun, ::testing::Values("shm", "tcp", "ucx_tcp", "ucx_sm"),
                         [](const auto& info) { return std::string(info.param); });

// Over the mpi transport the dead rank never called MPI_Finalize, and mpirun ends the whole job as
// soon as it notices, naming that rank; a survivor that noticed first names it too. Either way the
// job ends non-zero within the timeout plus a few seconds and no survivor passes.
TEST(KillUnderMpirunMpi, JobEndsNamingTheLostRank) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed";
  const Result r = sh(kClean + "FSDP_TIMEOUT_SEC=5 " + transport_env("mpi") + kMpirun + " -x FSDP_TIMEOUT_SEC" +
                      mpirun_exports("mpi") + " -np 3 sh -c '" + kCheck +
                      " --die-rank 1 --die-after 3; echo \"rank $OMPI_COMM_WORLD_RANK exit $?\"'");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "rank 1 exit 137\n"), 1) << r.output;
  EXPECT_EQ(count(r.output, " exit 0\n"), 0) << r.output;
  const bool survivor_named = std::regex_search(
      r.output, std::regex("fsdp-world-check: rank [02] FAILED: PeerLostError: [^\n]*(peer 1,|also lost: rank 1 )"));
  const bool mpirun_named = r.output.find("process rank 1 with PID") != std::string::npos;
  EXPECT_TRUE(survivor_named || mpirun_named) << r.output;
  EXPECT_LT(r.seconds, 5 + kEndSlackSec) << r.output;
}

// --- fsdp-run's own contract ------------------------------------------------------------------------

TEST(FsdpRun, PropagatesExitCodeAndTagsLines) {
  const Result r = sh(kClean + "FSDP_RUN_GRACE_SEC=2 " + kRun +
                      " --nproc 3 -- sh -c 'echo \"hello from $RANK of $WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE "
                      "at $MASTER_ADDR\"; if [ $RANK = 2 ]; then echo oops >&2; exit 7; fi; exec sleep 30'");
  EXPECT_EQ(r.code, 7) << r.output;
  for (int k = 0; k < 3; ++k) {
    const std::string k_ = std::to_string(k);
    EXPECT_EQ(count(r.output, "[rank " + k_ + "] hello from " + k_ + " of 3 local " + k_ + "/3 at 127.0.0.1\n"), 1)
        << r.output;
  }
  EXPECT_EQ(count(r.output, "[rank 2] oops\n"), 1) << r.output;
  EXPECT_NE(r.output.find("fsdp-run: failed: rank 2 exited with status 7"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, kEndSlackSec) << "the sleeping ranks were not stopped\n" << r.output;
}

TEST(FsdpRun, SignalDeathExitsWith128PlusSignal) {
  const Result r = sh(kClean + kRun + " --nproc 2 -- sh -c 'if [ $RANK = 1 ]; then kill -9 $$; fi; exec sleep 30'");
  EXPECT_EQ(r.code, 137) << r.output;
  EXPECT_NE(r.output.find("rank 1 was killed by signal 9 (SIGKILL)"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, kEndSlackSec) << r.output;
}

TEST(FsdpRun, AllSucceedExitsZero) {
  const Result r = sh(kClean + kRun + " --nproc 4 -- true");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

// Long lines from several ranks at once: every line arrives whole, with its own rank's prefix.
TEST(FsdpRun, LinesNeverInterleave) {
  const Result r = sh(kClean + kRun +
                      " --nproc 3 -- sh -c 'x=$(printf %03000d 0); i=0; while [ $i -lt 100 ]; do echo \"$RANK:$x\"; "
                      "echo \"$RANK:$x\" >&2; i=$((i+1)); done'");
  ASSERT_EQ(r.code, 0) << r.output.substr(0, 2000);
  std::istringstream in(r.output);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    ASSERT_EQ(line.size(), 9 + 2 + 3000) << line.substr(0, 100);
    ASSERT_EQ(line.substr(0, 6), "[rank ");
    ASSERT_EQ(line[6], line[9]) << line.substr(0, 100);  // "[rank R] R:000..."
  }
  EXPECT_EQ(lines, 3 * 200);
}

// Without a user's choice each rank gets the cores fsdp-run may use divided by the ranks (at least
// one), in both variables, and fsdp-run says so once; a user's choice passes through untouched.
TEST(FsdpRun, GivesEachRankItsShareOfTheCores) {
  const std::string unset = kClean + "env -u OPENBLAS_NUM_THREADS ";
  const std::string show = " -- sh -c 'echo \"threads $OPENBLAS_NUM_THREADS/$OMP_NUM_THREADS\"'";
  Result r = sh(unset + "taskset -c 0 " + kRun + " --nproc 3" + show);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "threads 1/1\n"), 3) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-run: 1 BLAS/OpenMP thread(s) per rank: 1 core(s) for 3 local rank(s)"), 1) << r.output;

  r = sh(unset + "taskset -c 0,1 " + kRun + " --nproc 1" + show);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "threads 2/2\n"), 1) << r.output;

  r = sh(unset + "OMP_NUM_THREADS=3 " + kRun + " --nproc 2" + show);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "threads /3\n"), 2) << r.output;
  EXPECT_EQ(r.output.find("fsdp-run:"), std::string::npos) << r.output;
}

// --bind-to core: rank r runs on the r-th CPU fsdp-run may use (here the machine's first two, or the
// one it has), so each rank sees one CPU; more ranks than CPUs is refused before anything starts.
TEST(FsdpRun, BindToCorePinsEachRankToItsOwnCpu) {
  const std::string show = " -- sh -c 'echo \"rank $RANK on $(grep Cpus_allowed_list /proc/self/status | cut -f2)\"'";
  Result r = sh(kClean + "taskset -c 0 " + kRun + " --nproc 1 --bind-to core" + show);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "rank 0 on 0\n"), 1) << r.output;
  if (sh("taskset -c 0,1 true").code == 0) {
    r = sh(kClean + "taskset -c 0,1 " + kRun + " --nproc 2 --bind-to core" + show);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(count(r.output, "rank 0 on 0\n"), 1) << r.output;
    EXPECT_EQ(count(r.output, "rank 1 on 1\n"), 1) << r.output;
    r = sh(kClean + "taskset -c 0,1 " + kRun + " --nproc 2 --bind-to none" + show);  // the default: both CPUs
    EXPECT_EQ(count(r.output, "on 0-1\n"), 2) << r.output;
  }
  r = sh(kClean + "taskset -c 0 " + kRun + " --nproc 2 --bind-to core -- true");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--bind-to core: 2 ranks but only 1 CPUs"), std::string::npos) << r.output;
  r = sh(kRun + " --nproc 2 --bind-to socket -- true");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--bind-to wants core or none, got 'socket'"), std::string::npos) << r.output;
}

TEST(FsdpRun, NoTagOutput) {
  const Result r = sh(kClean + kRun + " --no-tag-output --nproc 2 -- echo plain");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.output, "plain\nplain\n");
}

TEST(FsdpRun, ForwardsSigterm) {
  const auto start = Clock::now();
  Background run({"/usr/bin/env", "OPENBLAS_NUM_THREADS=1", kRun, "--nproc", "2", "--", "/bin/sh", "-c",
                  "echo up; exec sleep 30"});  // a chosen thread count: the first lines are the ranks'

  EXPECT_NE(run.line().find("up"), std::string::npos);
  EXPECT_NE(run.line().find("up"), std::string::npos);
  EXPECT_EQ(run.stop(SIGTERM), 128 + SIGTERM);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 20);  // well below the ranks' 30 s sleep
}

// --- --max-restarts ----------------------------------------------------------------------------------

// Each start prints what it was told; rank 1 fails on the first two starts, the third succeeds.
TEST(FsdpRunRestarts, StartsTheJobAgainUntilItSucceeds) {
  const Result r = sh(kClean + "FSDP_RUN_TERM_DELAY_SEC=0 " + kRun +
                      " --nproc 2 --max-restarts 2 -- sh -c 'echo \"start $FSDP_RESTART_COUNT "
                      "$TORCHELASTIC_RESTART_COUNT of $FSDP_MAX_RESTARTS $TORCHELASTIC_MAX_RESTARTS: "
                      "$FSDP_RESTART_CAUSE\"; if [ $RANK = 1 ] && [ $FSDP_RESTART_COUNT -lt 2 ]; then exit 3; fi'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "[rank 1] start 0 0 of 2 2: \n"), 1) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-run: restart 1 of 2: rank 1 exited with status 3; starting all 2 ranks again"), 1)
      << r.output;
  EXPECT_EQ(count(r.output, "[rank 1] start 1 1 of 2 2: rank 1 exited with status 3\n"), 1) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-run: restart 2 of 2: "), 1) << r.output;
  EXPECT_EQ(count(r.output, "[rank 0] start 2 2 of 2 2: rank 1 exited with status 3\n"), 1) << r.output;
  EXPECT_EQ(count(r.output, "failed"), 0) << r.output;
}

TEST(FsdpRunRestarts, ExhaustedNamesTheLastFailure) {
  const Result r = sh(kClean + "FSDP_RUN_TERM_DELAY_SEC=0 " + kRun +
                      " --nproc 2 --max-restarts 1 -- sh -c 'if [ $RANK = 1 ]; then exit 3; fi; exec sleep 30'");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-run: restart 1 of 1: rank 1 exited with status 3"), 1) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-run: restart 2"), 0) << r.output;
  EXPECT_NE(r.output.find("fsdp-run: failed: rank 1 exited with status 3 (no restart left: 1 used)\n"),
            std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 2 * kEndSlackSec) << "the sleeping ranks were not stopped\n" << r.output;
}

// Without the flag a failure ends the job as it always did: one start, no restart line.
TEST(FsdpRunRestarts, NoneByDefault) {
  const Result r = sh(kClean + kRun + " --nproc 2 -- sh -c 'echo start; if [ $RANK = 1 ]; then exit 3; fi'");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_EQ(count(r.output, "start\n"), 2) << r.output;
  EXPECT_EQ(count(r.output, "restart"), 0) << r.output;
}

// The restarted ranks meet in the store under fsdp/<run id>/attempt1/, never reading what the first
// start's rank 0 published there before rank 1 died: with the second start's rank 0 a second late, its
// rank 1 would find the old host/0 and job id, and attach to a shared-memory segment that is not there.
TEST(FsdpRunRestarts, RanksJoinAgainUnderAFreshNamespace) {
  const Result r = sh(kClean + "FSDP_RUN_TERM_DELAY_SEC=0.5 FSDP_RENDEZVOUS_TIMEOUT_SEC=10 " + kRun +
                      " --nproc 2 --max-restarts 1 -- sh -c 'if [ $RANK = 1 ] && [ $FSDP_RESTART_COUNT = 0 ]; then "
                      "sleep 0.3; kill -9 $$; fi; if [ $RANK = 0 ] && [ $FSDP_RESTART_COUNT = 1 ]; then sleep 1; fi; "
                      "exec " +
                      kCheck + "'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-run: restart 1 of 1: rank 1 was killed by signal 9 (SIGKILL)"), 1) << r.output;
  EXPECT_EQ(count(r.output, "fsdp-world-check OK"), 2) << r.output;
}

TEST(FsdpRunRestarts, ASignalToFsdpRunIsNoFailureToRestartFrom) {
  Background run({"/usr/bin/env", "OPENBLAS_NUM_THREADS=1", kRun, "--nproc", "2", "--max-restarts", "3", "--",
                  "/bin/sh", "-c", "echo up; exec sleep 30"});
  EXPECT_NE(run.line().find("up"), std::string::npos);
  EXPECT_NE(run.line().find("up"), std::string::npos);
  EXPECT_EQ(run.stop(SIGTERM), 128 + SIGTERM);
}

// Two launchers (--nnodes 2, one rank each, both on this host): rank 1, on node 1, dies on the first
// start; both launchers agree through node 0's store to start again, and the second start's ranks meet
// under its own namespace and check every collective.
std::string two_node_restart(int node1_max_restarts) {
  const std::string node = kClean + "FSDP_JOB_SECRET=" + std::string(64, 'a') + " FSDP_RUN_TERM_DELAY_SEC=0.5 " + kRun +
                           " --nnodes 2 --nproc 1 --master-addr 127.0.0.1 --master-port " +
                           std::to_string(free_port()) + " --node-rank ";
  const std::string program =
      " -- sh -c 'if [ $RANK = 1 ] && [ $FSDP_RESTART_COUNT = 0 ]; then sleep 0.3; kill -9 "
      "$$; fi; exec " +
      kCheck + "'";
  return sh("{ " + node + "1 --max-restarts " + std::to_string(node1_max_restarts) + program +
            " 2>&1; echo \"node 1 exit $?\"; } & " + node + "0 --max-restarts 1" + program +
            " 2>&1; echo \"node 0 exit $?\"; wait")
      .output;
}

TEST(FsdpRunRestarts, LaunchersOfTwoNodesAgreeToRestart) {
  const std::string out = two_node_restart(1);
  EXPECT_EQ(count(out, "node 0 exit 0\n") + count(out, "node 1 exit 0\n"), 2) << out;
  EXPECT_EQ(count(out, "fsdp-run: restart 1 of 1: rank 1 was killed by signal 9 (SIGKILL)"), 2) << out;
  EXPECT_EQ(count(out, "fsdp-world-check OK"), 2) << out;
}

TEST(FsdpRunRestarts, NodesWithDifferentMaxRestartsRefuseToGuess) {
  const std::string out = two_node_restart(2);
  EXPECT_EQ(count(out, "node 0 exit "), 1) << out;
  EXPECT_EQ(count(out, "node 0 exit 0\n") + count(out, "node 1 exit 0\n"), 0) << out;
  EXPECT_EQ(count(out, "runs with --max-restarts "), 2) << out;
  EXPECT_EQ(count(out, "fsdp-run: restart"), 0) << out;
}

TEST(FsdpRun, UnknownOption) {
  const Result r = sh(kRun + " --nproc 2 --bogus -- true");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("unknown option '--bogus'"), std::string::npos) << r.output;
}

// --- Rendezvous failures and the external store ----------------------------------------------------

TEST(Rendezvous, TimeoutNamesTheRankThatNeverCame) {
  const std::string port = std::to_string(free_port());
  const Result r = sh(kClean + "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
                      " FSDP_RENDEZVOUS_TIMEOUT_SEC=1 " + kCheck);
  EXPECT_EQ(r.code, 1) << r.output;
  for (const char* needle :
       {"rank 0 FAILED: TimeoutError", "'fsdp/default/host/1'", "rank 1 never arrived", "1000 ms"}) {
    EXPECT_NE(r.output.find(needle), std::string::npos) << needle << "\n" << r.output;
  }
  EXPECT_LT(r.seconds, kEndSlackSec);
}

TEST(Rendezvous, NoStoreForRankOneNamesTheStore) {
  const std::string port = std::to_string(free_port());
  const Result r = sh(kClean + "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
                      " FSDP_RENDEZVOUS_TIMEOUT_SEC=1 " + kCheck);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 FAILED: TimeoutError: rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:" + port), std::string::npos) << r.output;
}

TEST(ExternalStore, TwoJobsInARowThenSigterm) {
  Background store({kStore, "--port", "0", "--host", "127.0.0.1"});
  const std::string first = store.line();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first, m, std::regex(R"(serving on 127\.0\.0\.1:(\d+))"))) << first;
  const std::string port = m[1];
  for (int job = 0; job < 2; ++job) {  // the first job's keys must not confuse the second
    const Result r =
        sh(kClean + "FSDP_STORE_EXTERNAL=1 " + kRun + " --no-store --master-port " + port + " --nproc 2 -- " + kCheck);
    ASSERT_EQ(r.code, 0) << "job " << job << "\n" << r.output;
    EXPECT_EQ(count(r.output, "fsdp-world-check OK"), 2) << r.output;
  }
  EXPECT_EQ(store.stop(SIGTERM), 0);
}

// --- Authenticated jobs -----------------------------------------------------------------------------

// fsdp-run gives every rank of a job the same fresh secret, and another job another one.
TEST(JobSecret, FsdpRunGivesEachJobItsOwnSecret) {
  const std::string print = " --nproc 2 -- sh -c 'echo secret=$FSDP_JOB_SECRET'";
  const Result a = sh(kClean + kRun + print), b = sh(kClean + kRun + print);
  ASSERT_EQ(a.code, 0) << a.output;
  std::smatch m0, m1;
  ASSERT_TRUE(std::regex_search(a.output, m0, std::regex(R"(\[rank 0\] secret=([0-9a-f]{64})\n)"))) << a.output;
  ASSERT_TRUE(std::regex_search(a.output, m1, std::regex(R"(\[rank 1\] secret=([0-9a-f]{64})\n)"))) << a.output;
  EXPECT_EQ(m0[1], m1[1]);
  EXPECT_EQ(b.output.find(m0[1].str()), std::string::npos) << "two jobs got the same secret";
}

// A rank of an fsdp-run job that lacks the job's secret is refused by the store fsdp-run serves, and
// says why; so is one with another secret.
TEST(JobSecret, AStoreClientWithoutTheSecretIsRefused) {
  for (const std::string without : {"env -u FSDP_JOB_SECRET",
                                    "env FSDP_JOB_SECRET=00112233445566778899aabbccddeeff"}) {
    const Result r = sh(kClean + "FSDP_RENDEZVOUS_TIMEOUT_SEC=3 " + kRun + " --nproc 2 -- sh -c 'if [ $RANK = 1 ]; then " +
                        without + " " + kCheck + "; else " + kCheck + "; fi'");
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("rank 1 FAILED: CommError"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("refused this client's proof of the job secret"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("refused: wrong proof of the job secret"), std::string::npos) << r.output;
    EXPECT_LT(r.seconds, 30);
  }
}

// The secret from an owner-only file reaches every rank (the job passes); a file others may read, or
// a secret that is not hex, is refused before anything starts.
TEST(JobSecret, SecretFileMustBeOwnerOnly) {
  char path[] = "/tmp/fsdp-secret-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
  ASSERT_EQ(::write(fd, hex.data(), hex.size()), static_cast<ssize_t>(hex.size()));
  ::close(fd);
  ASSERT_EQ(::chmod(path, 0600), 0);
  const Result ok = sh(kClean + "FSDP_TRANSPORT=tcp FSDP_JOB_SECRET_FILE=" + path + " " + kRun + " --nproc 2 -- " + kCheck);
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_EQ(count(ok.output, "fsdp-world-check OK"), 2) << ok.output;
  ASSERT_EQ(::chmod(path, 0644), 0);
  const Result bad = sh(kClean + "FSDP_JOB_SECRET_FILE=" + path + " " + kRun + " --nproc 2 -- true");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("chmod 600"), std::string::npos) << bad.output;
  ::unlink(path);
  const Result garbled = sh(kClean + "FSDP_JOB_SECRET=not-a-secret " + kRun + " --nproc 1 -- true");
  EXPECT_EQ(garbled.code, 2) << garbled.output;
  EXPECT_NE(garbled.output.find("FSDP_JOB_SECRET is not a hex string"), std::string::npos) << garbled.output;
}

// fsdp-store: the loopback by default, or a named interface's address; another address only with a
// secret; the job's ranks prove the store's secret, and a job without it is refused.
TEST(JobSecret, FsdpStoreWithASecret) {
  const Result open = sh(kClean + kStore + " --port 0 --host 0.0.0.0");
  EXPECT_EQ(open.code, 2) << open.output;
  EXPECT_NE(open.output.find("refusing to serve 0.0.0.0 without a job secret"), std::string::npos) << open.output;

  const Result missing = sh(kClean + kStore + " --port 0 --interface fsdp-no-such-if0");
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("interface 'fsdp-no-such-if0' does not exist"), std::string::npos) << missing.output;
  Background by_name({kStore, "--port", "0", "--interface", "lo"});
  EXPECT_NE(by_name.line().find("serving on 127.0.0.1:"), std::string::npos);
  EXPECT_EQ(by_name.stop(SIGTERM), 0);

  const std::string secret = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";
  ::setenv("FSDP_JOB_SECRET", secret.c_str(), 1);
  Background store({kStore, "--port", "0"});
  ::unsetenv("FSDP_JOB_SECRET");
  const std::string first = store.line();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first, m, std::regex(R"(serving on 127\.0\.0\.1:(\d+))"))) << first;
  const std::string job = kRun + " --no-store --master-port " + std::string(m[1]) + " --nproc 2 -- " + kCheck;
  const Result good = sh(kClean + "FSDP_STORE_EXTERNAL=1 FSDP_JOB_SECRET=" + secret + " " + job);
  EXPECT_EQ(good.code, 0) << good.output;
  EXPECT_EQ(count(good.output, "fsdp-world-check OK"), 2) << good.output;
  const Result stranger = sh(kClean + "FSDP_STORE_EXTERNAL=1 FSDP_RENDEZVOUS_TIMEOUT_SEC=3 " + job);
  EXPECT_NE(stranger.code, 0) << stranger.output;
  EXPECT_NE(stranger.output.find("refused this client's proof of the job secret"), std::string::npos)
      << stranger.output;
  EXPECT_EQ(store.stop(SIGTERM), 0);
}

}  // namespace
