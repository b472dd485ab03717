// connect_world's pure pieces (topology, transport choice) and whole start-ups with ranks as threads
// of this process: every rank gets its own ProcessEnv, so shm and tcp both work in one process.
#include "launch/world.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "collectives/types/errors.h"
#include "common/atomic_file.h"
#include "launch/cli_flags.h"
#include "launch/world_rendezvous.h"
#include "tests/collectives/test_support.h"
#include "tests/common/scoped_env.h"

namespace fsdp::launch {
namespace {

using namespace std::chrono_literals;

TEST(Topology, OneHost) {
  Topology t = make_topology({"a", "a", "a"}, 2);
  EXPECT_EQ(t.host_count, 1);
  EXPECT_EQ(t.host_index, 0);
  EXPECT_EQ(t.local_rank, 2);
  EXPECT_EQ(t.local_size, 3);
  EXPECT_EQ(t.host_of_rank, (std::vector<int>{0, 0, 0}));
}

TEST(Topology, UnevenInterleavedHostsNumberedByLowestRank) {
  // Ranks 0,2,5 on "y", 1,3 on "x", 4 on "z": y is host 0 (rank 0), x host 1 (rank 1), z host 2.
  const std::vector<std::string> ids = {"y", "x", "y", "x", "z", "y"};
  Topology t = make_topology(ids, 5);
  EXPECT_EQ(t.host_of_rank, (std::vector<int>{0, 1, 0, 1, 2, 0}));
  EXPECT_EQ(t.host_count, 3);
  EXPECT_EQ(t.host_index, 0);
  EXPECT_EQ(t.local_rank, 2);
  EXPECT_EQ(t.local_size, 3);
  Topology t3 = make_topology(ids, 3);
  EXPECT_EQ(t3.host_index, 1);
  EXPECT_EQ(t3.local_rank, 1);
  EXPECT_EQ(t3.local_size, 2);
  Topology t4 = make_topology(ids, 4);
  EXPECT_EQ(t4.local_rank, 0);
  EXPECT_EQ(t4.local_size, 1);
  EXPECT_THROW(make_topology(ids, 6), InvalidArgument);
}

TEST(TransportChoice, AutoPicksShmOnOneHostShmPlusTcpAcross) {
  EXPECT_EQ(choose_transport("auto", make_topology({"a", "a"}, 0), {"a"}), "shm");
  EXPECT_EQ(choose_transport("auto", make_topology({"a", "b"}, 0), {"a", "b"}), "shm+tcp");
  EXPECT_EQ(choose_transport("shm+tcp", make_topology({"a", "a"}, 0), {"a"}), "shm");
  EXPECT_EQ(choose_transport("shm+ucx", make_topology({"a", "a", "b"}, 1), {"a", "b"}), "shm+ucx");
  EXPECT_EQ(choose_transport("tcp", make_topology({"a", "a"}, 0), {"a"}), "tcp");
  EXPECT_EQ(choose_transport("shm", make_topology({"a", "a"}, 0), {"a"}), "shm");
  EXPECT_EQ(choose_transport("ucx", make_topology({"a", "b"}, 0), {"a", "b"}), "ucx");
  EXPECT_EQ(choose_transport("mpi", make_topology({"a", "a"}, 0), {"a"}), "mpi");
}

TEST(TransportChoice, ShmAcrossHostsNamesTheHosts) {
  try {
    choose_transport("shm", make_topology({"a", "b", "a"}, 0), {"node1 (10.0.0.1)", "node2 (10.0.0.2)"});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node1 (10.0.0.1): ranks 0,2"), std::string::npos) << what;
    EXPECT_NE(what.find("node2 (10.0.0.2): ranks 1"), std::string::npos) << what;
  }
}

TEST(TransportChoice, RequestPrecedence) {
  ::unsetenv("FSDP_TRANSPORT");
  EXPECT_EQ(resolve_transport_request("auto"), "auto");
  ::setenv("FSDP_TRANSPORT", "tcp", 1);
  EXPECT_EQ(resolve_transport_request("auto"), "tcp");  // the variable beats the default
  EXPECT_EQ(resolve_transport_request("shm"), "shm");   // an explicit choice beats the variable
#if defined(FSDP_HAVE_UCX) && defined(FSDP_HAVE_MPI)
  ::setenv("FSDP_TRANSPORT", "ucx", 1);
  EXPECT_EQ(resolve_transport_request("auto"), "ucx");
  EXPECT_EQ(resolve_transport_request("mpi"), "mpi");
#endif
  ::setenv("FSDP_TRANSPORT", "carrier-pigeon", 1);
  EXPECT_THROW(resolve_transport_request("auto"), InvalidArgument);
  ::unsetenv("FSDP_TRANSPORT");
  EXPECT_THROW(resolve_transport_request("carrier-pigeon"), InvalidArgument);
}

// --help lists every transport a request may name (shm+tcp and shm+ucx were missing).
TEST(TransportChoice, HelpListsEveryTransport) {
  const std::string help = launch_flags_usage();
  const size_t at = help.find("--transport ") + std::strlen("--transport ");
  const std::string listed = "|" + help.substr(at, help.find_first_of(" \n", at) - at) + "|";
  for (const char* t : {"auto", "shm", "tcp", "ucx", "mpi", "shm+tcp", "shm+ucx"}) {
    EXPECT_NE(listed.find(std::string("|") + t + "|"), std::string::npos) << t << " missing from: " << help;
  }
}

TEST(WorldOptions, RendezvousTimeoutFromEnv) {
  ::setenv("FSDP_RENDEZVOUS_TIMEOUT_SEC", "2.5", 1);
  EXPECT_EQ(WorldOptions().rendezvous_timeout, 2500ms);
  ::setenv("FSDP_RENDEZVOUS_TIMEOUT_SEC", "soon", 1);
  EXPECT_THROW(WorldOptions(), InvalidArgument);
  ::unsetenv("FSDP_RENDEZVOUS_TIMEOUT_SEC");
  EXPECT_EQ(WorldOptions().rendezvous_timeout, 120s);
}

// n ranks as threads against an external store; each runs the multi-process collectives suite. With
// a `secret`, the store and every rank hold it (the store and TCP handshakes prove it).
void run_threads(int n, const std::string& transport, const std::string& secret = "") {
  StoreServerOptions server_options;
  server_options.secret = secret;
  StoreServer server("127.0.0.1", 0, server_options);
  std::vector<int> failures(n, 0);
  std::vector<std::string> names(n), jobs(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ProcessEnv env;
      env.rank = r;
      env.world_size = n;
      env.local_world_size = n;
      env.local_rank = r;
      env.master_addr = "127.0.0.1";
      env.master_port = server.port();
      env.source = "override";
      WorldOptions o;
      o.transport = transport;
      o.external_store = true;
      o.rendezvous_timeout = 20s;
      o.secret = JobSecret{secret, "test"};
      try {
        World w = connect_world(env, o);
        EXPECT_EQ(w.topology.host_count, 1);
        EXPECT_EQ(w.topology.local_rank, r);
        EXPECT_EQ(w.topology.local_size, n);
        names[r] = w.transport_name;
        jobs[r] = w.job_id;
        failures[r] = testing::run_collectives_suite(*w.comm, r, n);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
        failures[r] = 1;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(failures[r], 0) << "rank " << r;
    EXPECT_EQ(names[r], transport == "auto" ? "shm" : transport);
    EXPECT_EQ(jobs[r], jobs[0]);
  }
  // The job cleaned up after itself: a second job on the same store starts from nothing.
  StoreClientOptions probe_options;
  probe_options.secret = secret;
  StoreClient probe("127.0.0.1", server.port(), probe_options);
  EXPECT_EQ(probe.num_keys(), 0);
}

// Under a sanitizer each transport runs at 2 ranks only (world sizes add nothing to its code paths).
TEST(ConnectWorld, ThreadsOverShm) {
  for (int n : testing::kUnderSanitizer ? std::vector<int>{2} : std::vector<int>{1, 2, 3}) run_threads(n, "auto");
}

TEST(ConnectWorld, ThreadsOverTcp) {
  for (int n : testing::kUnderSanitizer ? std::vector<int>{2} : std::vector<int>{2, 4}) run_threads(n, "tcp");
}

TEST(ConnectWorld, ThreadsOverTcpWithAJobSecret) { run_threads(3, "tcp", random_bytes(32)); }

// FSDP_TCP_CONNECTIONS reaches the transport: 3 connections per pair, data striped across them.
TEST(ConnectWorld, ThreadsOverTcpStripedByEnvironment) {
  ::setenv("FSDP_TCP_CONNECTIONS", "3", 1);
  run_threads(2, "tcp");
  ::unsetenv("FSDP_TCP_CONNECTIONS");
}

#ifdef FSDP_HAVE_UCX
// Worker addresses go through the store (and leave no keys behind).
TEST(ConnectWorld, ThreadsOverUcx) {
  for (int n : testing::kUnderSanitizer ? std::vector<int>{2} : std::vector<int>{2, 3}) run_threads(n, "ucx");
}
#endif

TEST(ConnectWorld, SingleRankNeedsNoStore) {
  ProcessEnv env;  // rank 0 of 1, no master
  WorldOptions o;
  o.transport = "auto";
  World w = connect_world(env, o);
  EXPECT_EQ(w.store, nullptr);
  EXPECT_EQ(w.store_server, nullptr);
  EXPECT_EQ(w.transport_name, "shm");
  float x = 3.f;
  w.comm->all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::sum()).wait();
  EXPECT_EQ(x, 3.f);
}

TEST(ConnectWorld, NoRendezvousAddressIsAnError) {
  ProcessEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.source = "torchrun";
  try {
    connect_world(env);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
  }
}

// mpirun on one host without MASTER_*: rank 0 makes the job secret and hands it over in the 0600
// rendezvous file, so both ranks hold the same fresh one. A file under that name that others may
// read (planted, or left with a wide mode) is never believed; the same file made private is.
TEST(ConnectWorld, FileRendezvousHandsOverTheSecretAndIgnoresPlantedFiles) {
  char dir[] = "/tmp/fsdp-rdv-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  testing::ScopedEnv job("OMPI_MCA_ess_base_jobid", "4242"), where("FSDP_RENDEZVOUS_DIR", dir),
      none("FSDP_JOB_SECRET", nullptr), no_file("FSDP_JOB_SECRET_FILE", nullptr);
  auto env_of = [](int rank) {
    ProcessEnv env;
    env.rank = rank;
    env.world_size = 2;
    env.local_rank = rank;
    env.local_world_size = 2;
    env.source = "mpirun";
    return env;
  };
  WorldOptions o;
  o.rendezvous_timeout = 10s;
  std::vector<std::string> secrets(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        World w = connect_world(env_of(r), o);
        secrets[r] = w.secret.key;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(secrets[0].size(), kGeneratedSecretBytes);
  EXPECT_EQ(secrets[0], secrets[1]);

  // A store rank 1 would talk to if it believed the file, and the file pointing at it.
  const std::string secret = random_bytes(32);
  StoreServerOptions server_options;
  server_options.secret = secret;
  StoreServer planted_store("127.0.0.1", 0, server_options);
  const std::string path = std::string(dir) + "/fsdp-rendezvous-4242";
  ASSERT_EQ(write_file_atomically(path,
                                  std::to_string(planted_store.port()) + " " + std::to_string(::getpid()) + " " +
                                      to_hex(secret) + "\n",
                                  0644),
            "");
  ::chmod(path.c_str(), 0644);  // whatever the umask
  o.rendezvous_timeout = 300ms;
  auto failure_of_rank1 = [&] {
    try {
      connect_world(env_of(1), o);
    } catch (const TimeoutError& e) {
      return std::string(e.what());
    }
    return std::string("(no TimeoutError)");
  };
  const std::string ignored = failure_of_rank1();
  EXPECT_NE(ignored.find("never published the store's port"), std::string::npos) << ignored;
  ::chmod(path.c_str(), 0600);
  const std::string believed = failure_of_rank1();  // reaches the store, then waits for rank 0 there
  EXPECT_NE(believed.find("rank 0 never arrived"), std::string::npos) << believed;
  ::unlink(path.c_str());
  ::rmdir(dir);
}

TEST(ConnectWorld, RendezvousTimeoutNamesTheMissingRank) {
  StoreServer server("127.0.0.1", 0);
  ProcessEnv env;
  env.rank = 0;
  env.world_size = 3;
  env.master_addr = "127.0.0.1";
  env.master_port = server.port();
  WorldOptions o;
  o.external_store = true;
  o.rendezvous_timeout = 300ms;
  std::thread rank1([&] {
    ProcessEnv e1 = env;
    e1.rank = 1;
    EXPECT_THROW(connect_world(e1, o), CommError);
  });
  try {
    connect_world(env, o);
    ADD_FAILURE() << "no error";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
    EXPECT_NE(what.find("'fsdp/default/host/2'"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 2 never arrived"), std::string::npos) << what;
    EXPECT_NE(what.find("300 ms"), std::string::npos) << what;
  }
  rank1.join();
}

// A store on a fake clock: a wait or get for a missing key takes its whole timeout (the clock moves
// by it) and throws TimeoutError, as the real store's answer after that long; `gone` makes every call
// after the first wait fail as a store whose server exited. What the start-up spends is read off the
// clock, not measured.
class FakeClockStore : public KeyValueStore {
 public:
  std::map<std::string, std::string> values;
  StartupDeadline::Clock::time_point now{};
  bool gone = false;
  int calls = 0;

  StartupDeadline::Now clock() {
    return [this] { return now; };
  }
  void set(const std::string& k, const std::string& v) override { values[k] = v; }
  std::string get(const std::string& k) override { return get(k, 1h); }
  std::string get(const std::string& k, std::chrono::milliseconds timeout) override {
    look(timeout, values.count(k) ? std::vector<std::string>{} : std::vector<std::string>{k});
    return values.at(k);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, 1h); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!values.count(k)) missing.push_back(k);
    }
    look(timeout, missing);
  }
  int64_t add(const std::string&, int64_t) override { return 0; }
  std::string compare_set(const std::string& k, const std::string& expected, const std::string& desired) override {
    auto it = values.find(k);
    if (it == values.end()) return expected.empty() ? values[k] = desired : std::string();
    if (it->second == expected) it->second = desired;
    return it->second;
  }
  bool erase(const std::string& k) override { return values.erase(k) > 0; }
  std::string describe() const override { return "the fake store"; }

 private:
  void look(std::chrono::milliseconds timeout, const std::vector<std::string>& missing) {
    if (gone && calls++ > 0) {
      now += timeout;  // a reconnect that retries for as long as it is allowed
      throw CommError(ErrorContext{}, "connection refused");
    }
    if (missing.empty()) return;
    now += timeout;
    throw TimeoutError(ErrorContext{}, "missing");
  }
};

// 144 ranks, rank 77 never came: one timeout in all (the old gather then looked at every key for a
// whole timeout each), and only rank 77 is named.
TEST(GatherAll, NamesTheMissingRankWithinOneTimeoutInAll) {
  FakeClockStore store;
  const int n = 144;
  for (int r = 0; r < n; ++r) {
    if (r != 77) store.set(rank_key("p/", "host", r), "h");
  }
  const auto start = store.now;
  const StartupDeadline deadline(2000ms, store.clock());
  try {
    gather_all(store, "p/", "host", 5, n, deadline);
    ADD_FAILURE() << "no error";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 5, op rendezvous"), std::string::npos) << what;
    EXPECT_NE(what.find(": rank 77 never arrived"), std::string::npos) << what;
    EXPECT_NE(what.find("key 'p/host/77'"), std::string::npos) << what;
  }
  EXPECT_LE(store.now - start, 2000ms);
}

// The store's server went away during the wait (rank 0 exited): said as such, no rank blamed, one
// timeout in all although each look could have retried for a whole timeout.
TEST(GatherAll, AStoreThatWentAwayIsNamedNotTheRanks) {
  FakeClockStore store;
  store.gone = true;
  const auto start = store.now;
  const StartupDeadline deadline(2000ms, store.clock());
  try {
    gather_all(store, "p/", "tcp", 1, 4, deadline);
    ADD_FAILURE() << "no error";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stopped answering: connection refused"), std::string::npos) << what;
    EXPECT_EQ(what.find("never arrived"), std::string::npos) << what;
  }
  EXPECT_LE(store.now - start, 2000ms);
  EXPECT_EQ(store.calls, 2);  // the wait, then one look that found the store gone
}

// A start-up that can be abandoned (fault tolerance: a rank of the epoch exited) stops at the first slice
// after the reason appears, with PeerLostError naming it, long before its deadline; without a reason it
// still ends at the deadline with the usual words.
TEST(GatherAll, AnAbandonedStartUpStopsAtOnceNamingWhy) {
  FakeClockStore store;
  store.set(rank_key("p/", "host", 0), "h");
  const auto start = store.now;
  StartupDeadline deadline(120000ms, store.clock());
  int asked = 0;
  deadline.set_abandon([&] { return ++asked < 3 ? std::string() : std::string("rank 1 exited"); });
  try {
    gather_all(store, "p/", "host", 0, 2, deadline);
    ADD_FAILURE() << "no error";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("start-up abandoned waiting for every rank's 'p/host/<rank>': rank 1 exited"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(store.now - start, 60ms);  // three slices of 20 ms
  StartupDeadline patient(100ms, store.clock());
  patient.set_abandon([] { return std::string(); });
  EXPECT_THROW(get_from_rank0(store, "p/job_id", 1, patient), TimeoutError);
}

// Rank 0's refusal reaches every other rank in rank 0's words, and rank 0 waits until each has read
// it (their acknowledgements are what its wait returns on), within the one deadline.
TEST(Verdict, EveryRankReadsRankZerosWordsBeforeRankZeroGoes) {
  StoreServer server("127.0.0.1", 0);
  const int n = 4;
  std::vector<std::string> seen(n);
  std::vector<std::thread> readers;
  for (int r = 1; r < n; ++r) {
    readers.emplace_back([&, r] {
      StoreClient client("127.0.0.1", server.port());
      try {
        get_from_rank0(client, "p/transport", r, StartupDeadline(20s));
      } catch (const InvalidArgument& e) {
        seen[r] = e.what();
      }
    });
  }
  StoreClient rank0("127.0.0.1", server.port());
  publish_verdict(rank0, "p/transport", "shm across 2 hosts", n, StartupDeadline(20s));
  // Returned: every reader has acknowledged, so its answer was in hand before rank 0 could exit.
  for (const std::string& k : verdict_keys("p/transport", n)) EXPECT_EQ(rank0.get(k, 0ms), "1") << k;
  for (auto& t : readers) t.join();
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(seen[r], "rank " + std::to_string(r) + ": rank 0 refused the job: shm across 2 hosts");
  }
}

// Rank 2 never comes. Rank 0's deadline passes first; rank 1's is far off, yet it fails with rank 0's
// words ("rank 0 gave up": only rank 0's verdict can make it say that), so every rank that arrived
// ends with the same error, not later and not because the store vanished with rank 0.
TEST(Verdict, RankZeroGivingUpOnAGatherEndsTheOthersWithItsWords) {
  StoreServer server("127.0.0.1", 0);
  std::string rank1_error;
  std::thread rank1([&] {
    StoreClient client("127.0.0.1", server.port());
    client.set(rank_key("p/", "host", 1), "h1");
    try {
      gather_all(client, "p/", "host", 1, 3, StartupDeadline(60s));
    } catch (const TimeoutError& e) {
      rank1_error = e.what();
    }
  });
  StoreClient rank0("127.0.0.1", server.port());
  rank0.wait({rank_key("p/", "host", 1)}, 20s);  // rank 1 is in the gather (or about to be)
  rank0.set(rank_key("p/", "host", 0), "h0");
  std::string rank0_error;
  try {
    gather_all(rank0, "p/", "host", 0, 3, StartupDeadline(200ms));
  } catch (const TimeoutError& e) {
    rank0_error = e.what();
  }
  rank1.join();
  EXPECT_NE(rank0_error.find("rank 2 never arrived"), std::string::npos) << rank0_error;
  const std::string words = rank0_error.substr(rank0_error.find("timed out"));
  EXPECT_EQ(rank1_error, "rank 1, peer 0, op rendezvous, seq 0, 0 bytes: rank 0 gave up: " + words);
}

// Store errors name the rank whose client failed, not "rank -1".
TEST(StoreClientRank, ErrorsNameTheCallersRank) {
  StoreServer server("127.0.0.1", 0);
  StoreClientOptions o;
  o.rank = 3;
  StoreClient client("127.0.0.1", server.port(), o);
  try {
    client.get("never", 10ms);
    ADD_FAILURE() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("rank 3, op store_get", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace fsdp::launch
