// The flight recorder: the ring, the dump at the first failure, and the analysis that names the rank
// that is behind, diverged or missing. The multi-process case (a frozen rank under fsdp-run, read
// back by fsdp-flight) is launch.FrozenRank.flight_recorder_names_it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "collectives/core/flight_analysis.h"
#include "tests/collectives/test_support.h"

namespace fsdp::testing {
namespace {

using namespace std::chrono_literals;

FlightEntry entry(int rank, int comm_rank, int comm_size, const char* op, uint64_t seq, size_t bytes,
                  FlightEntry::State state, uint64_t comm = 0x42) {
  FlightEntry e;
  e.rank = rank;
  e.comm = comm;
  e.comm_rank = comm_rank;
  e.comm_size = comm_size;
  std::strncpy(e.op, op, sizeof(e.op) - 1);
  e.seq = seq;
  e.bytes = bytes;
  e.state = state;
  e.queued = 1.0 + static_cast<double>(seq);
  return e;
}

bool has(const std::vector<FlightFinding>& findings, FlightFinding::Kind kind, const std::string& part) {
  for (const auto& f : findings) {
    if (f.kind == kind && f.text.find(part) != std::string::npos) return true;
  }
  return false;
}

std::string all_text(const std::vector<FlightFinding>& findings) {
  std::string s;
  for (const auto& f : findings) s += f.text + "\n";
  return s;
}

TEST(FlightRecorder, RingKeepsTheNewestEntriesInOrder) {
  FlightRecorder r(4);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i)
    ids.push_back(
        r.queued(CollectiveKind::kAllGather, ErrorContext{0, -1, "all_gather", uint64_t(i), 64}, 7, 0, 2, false, -1));
  r.started(ids[5]);
  r.finished(ids[4], nullptr);
  r.started(ids[0]);  // evicted: ignored, must not touch the entry that reused its slot
  const auto entries = r.snapshot();
  ASSERT_EQ(entries.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(entries[i].seq, i + 2);
  EXPECT_EQ(entries[2].state, FlightEntry::State::kDone);
  EXPECT_EQ(entries[3].state, FlightEntry::State::kStarted);
  EXPECT_EQ(entries[0].state, FlightEntry::State::kQueued);
  FlightRecorder off(0);
  EXPECT_EQ(off.queued(CollectiveKind::kBarrier, ErrorContext{0, -1, "barrier", 0, 0}, 7, 0, 2, false, -1), 0u);
  EXPECT_TRUE(off.snapshot().empty());
}

TEST(FlightRecorder, DumpRoundTripsThroughTheReader) {
  const std::string dir = std::filesystem::temp_directory_path() / unique_job_name("flight-rt");
  FlightRecorder r(8);
  EXPECT_EQ(r.dump("nothing set"), "");  // no directory: nothing written
  r.set_dump_dir(dir);
  const uint64_t a = r.queued(CollectiveKind::kReduceScatter, ErrorContext{3, -1, "reduce_scatter", 11, 4096}, 0xabcdef,
                              1, 4, false, -1);
  r.started(a);
  const uint64_t b = r.queued(CollectiveKind::kSend, ErrorContext{3, -1, "send", 2, 16}, 0xabcdef, 1, 4, true, 2);
  Failure f{Failure::Kind::kTimeout, ErrorContext{3, 2, "send", 2, 16}, "waited 2 s"};
  r.finished(b, &f);  // the first failure dumps by itself
  const std::string path = dir + "/flight_recorder_rank3.json";
  ASSERT_TRUE(std::filesystem::exists(path));
  const FlightDump d = read_flight_dump(path);
  EXPECT_EQ(d.rank, 3);
  EXPECT_NE(d.reason.find("first failed operation"), std::string::npos) << d.reason;
  ASSERT_EQ(d.entries.size(), 2u);
  EXPECT_EQ(d.entries[0].comm, 0xabcdefu);
  EXPECT_STREQ(d.entries[0].op, "reduce_scatter");
  EXPECT_EQ(d.entries[0].state, FlightEntry::State::kStarted);
  EXPECT_EQ(d.entries[0].comm_rank, 1);
  EXPECT_EQ(d.entries[0].comm_size, 4);
  EXPECT_TRUE(d.entries[1].p2p);
  EXPECT_EQ(d.entries[1].peer, 2);
  EXPECT_EQ(d.entries[1].state, FlightEntry::State::kFailed);
  EXPECT_NE(d.entries[1].error.find("waited 2 s"), std::string::npos);
  std::filesystem::remove_all(dir);
  EXPECT_THROW(read_flight_dumps(dir), std::runtime_error);
}

// What a process that fails one collective writes on stderr: the recorder dumps at the failure, the
// program reports the error, then (with `dump_after_report`, as fsdp-train does) dumps again, and
// exits. Runs in a child whose stderr is a pipe; returns what it wrote.
std::string stderr_of_failing_process(const std::string& dir, bool dump_after_report) {
  int out[2];
  if (::pipe(out) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 2);
    ::close(out[0]);
    ::close(out[1]);
    FlightRecorder& r = FlightRecorder::instance();
    r.set_dump_dir(dir);
    const uint64_t id =
        r.queued(CollectiveKind::kAllReduce, ErrorContext{5, -1, "all_reduce", 3, 8}, 0x42, 0, 2, false, -1);
    Failure f{Failure::Kind::kTimeout, ErrorContext{5, 1, "all_reduce", 3, 8}, "timed out"};
    r.finished(id, &f);
    std::fprintf(stderr, "program: the error\n");
    if (dump_after_report) r.dump("program failed: the error");
    std::exit(0);  // the exit handlers run, as at the end of main
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t got; (got = ::read(out[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(got));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return text;
}

// One notice line per rank, after the error it belongs to, whether or not the program dumps again
// after reporting it (it used to come before the error, and twice with the second dump).
TEST(FlightRecorder, NoticeIsOneLineAfterTheError) {
  const std::string dir = std::filesystem::temp_directory_path() / unique_job_name("flight-notice");
  for (bool dump_after_report : {false, true}) {
    const std::string text = stderr_of_failing_process(dir, dump_after_report);
    const std::string notice = "wrote its last 1 collectives to " + dir + "/flight_recorder_rank";
    const size_t error = text.find("program: the error\n");
    const size_t first = text.find(notice);
    ASSERT_NE(error, std::string::npos) << text;
    ASSERT_NE(first, std::string::npos) << text;
    EXPECT_LT(error, first) << text;
    EXPECT_EQ(text.find(notice, first + 1), std::string::npos) << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
    EXPECT_TRUE(std::filesystem::exists(dir)) << text;
    std::filesystem::remove_all(dir);
  }
}

TEST(FlightAnalysis, NamesTheRankBehindTheMissingOneAndWhatWasInFlight) {
  using S = FlightEntry::State;
  FlightDump r0, r2;
  r0.rank = 0;
  r2.rank = 2;
  r0.monotonic_time = r2.monotonic_time = 30;
  for (uint64_t s = 0; s < 5; ++s) {
    r0.entries.push_back(entry(0, 0, 3, "all_gather", s, 4096, S::kDone));
    if (s < 4) r2.entries.push_back(entry(2, 2, 3, "all_gather", s, 4096, S::kDone));
  }
  r0.entries.push_back(entry(0, 0, 3, "all_reduce", 5, 64, S::kFailed));
  r0.entries.back().error = "timed out";
  const auto findings = analyze_findings({r0, r2});
  EXPECT_TRUE(
      has(findings, FlightFinding::Kind::kBehind, "rank 2 is behind: its newest collective is all_gather seq 3"))
      << all_text(findings);
  EXPECT_TRUE(has(findings, FlightFinding::Kind::kBehind, "rank 0 reached all_reduce seq 5")) << all_text(findings);
  EXPECT_TRUE(has(findings, FlightFinding::Kind::kMissing, "no record from comm ranks 1")) << all_text(findings);
  EXPECT_TRUE(has(findings, FlightFinding::Kind::kFailed, "rank 0 first failed in all_reduce seq 5"))
      << all_text(findings);
  EXPECT_FALSE(has(findings, FlightFinding::Kind::kDiverged, "")) << all_text(findings);
  const std::string report = analyze({r0, r2});
  EXPECT_NE(report.find("2 dump(s), ranks 0 2"), std::string::npos) << report;
}

TEST(FlightAnalysis, FindsWhereRanksDiverged) {
  using S = FlightEntry::State;
  FlightDump r0, r1;
  r0.rank = 0;
  r1.rank = 1;
  for (uint64_t s = 0; s < 3; ++s) {
    r0.entries.push_back(entry(0, 0, 2, "all_reduce", s, 64, S::kDone));
    r1.entries.push_back(entry(1, 1, 2, "all_reduce", s, 64, S::kDone));
  }
  r0.entries.push_back(entry(0, 0, 2, "all_reduce", 3, 64, S::kStarted));
  r1.entries.push_back(entry(1, 1, 2, "all_gather", 3, 64, S::kStarted));
  // Another communicator of the same ranks, in step: no finding about it.
  r0.entries.push_back(entry(0, 0, 2, "barrier", 0, 0, S::kDone, 0x99));
  r1.entries.push_back(entry(1, 1, 2, "barrier", 0, 0, S::kDone, 0x99));
  const auto findings = analyze_findings({r0, r1});
  EXPECT_TRUE(has(findings, FlightFinding::Kind::kDiverged,
                  "diverged at seq 3: rank 0 ran all_reduce seq 3 (64 bytes, started), rank 1 ran all_gather seq 3"))
      << all_text(findings);
  EXPECT_FALSE(has(findings, FlightFinding::Kind::kBehind, "")) << all_text(findings);
  EXPECT_FALSE(has(findings, FlightFinding::Kind::kMissing, "")) << all_text(findings);
  EXPECT_EQ(findings.front().kind, FlightFinding::Kind::kDiverged) << "the most telling finding comes first";
}

TEST(FlightRecorder, InProcessTimeoutDumpsAndTheAnalysisNamesTheLateRank) {
  // Rank 2 of 3 never calls the last all-reduce: ranks 0 and 1 time out in it. One process, so the
  // process's dump holds every rank's entries.
  const std::string dir = std::filesystem::temp_directory_path() / unique_job_name("flight-inproc");
  FlightRecorder::instance().set_dump_dir(dir);
  CommOptions o;
  o.timeout = 300ms;
  {
    InProcJob job(3, o);
    job.run([](Communicator& c) {
      std::vector<float> buf(16, 1.0f);
      for (int i = 0; i < 3; ++i) c.all_reduce(buf.data(), buf.data(), 16, DataType::kFloat32, ReduceOp::sum()).wait();
      if (c.rank() == 2) return;
      EXPECT_THROW(c.all_reduce(buf.data(), buf.data(), 16, DataType::kFloat32, ReduceOp::sum()).wait(), TimeoutError);
    });
  }
  FlightRecorder::instance().set_dump_dir("");
  const auto dumps = read_flight_dumps(dir);
  ASSERT_EQ(dumps.size(), 1u);
  const auto findings = analyze_findings(dumps);
  EXPECT_TRUE(
      has(findings, FlightFinding::Kind::kBehind, "rank 2 is behind: its newest collective is all_reduce seq 2"))
      << all_text(findings);
  EXPECT_TRUE(has(findings, FlightFinding::Kind::kInFlight, "all_reduce seq 3")) << all_text(findings);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fsdp::testing
