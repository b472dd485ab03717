#include "common/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "common/json.h"

namespace fsdp {
namespace {

using json::Value;

// A fresh folder for one test, removed when the test ends.
struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("fsdp_train_trace_" + std::to_string(::getpid()) + "_" +
                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::vector<Value> events_of(const std::string& json) {
  const Value doc = json::parse(json);
  EXPECT_EQ(doc.kind, Value::Kind::kObject);
  return doc.at("traceEvents").items;
}

TEST(Trace, WritesCompleteEventsAndNamedTracks) {
  Trace trace(3);
  {
    auto s = trace.span(Track::kCompute, "forward \"block\" 0");
  }
  trace.complete(Track::kCommunication, "all_gather", 100.0, 25.5, 4096);
  const auto events = events_of(trace.to_json());
  std::map<std::string, int> metadata;
  int complete = 0;
  for (const auto& e : events) {
    EXPECT_EQ(e.at("pid").num, 3);
    if (e.at("ph").str == "M") {
      const std::string key = e.at("name").str + ":" + std::to_string(static_cast<int>(e.at("tid").num));
      if (e.at("args").find("name") != nullptr) metadata[key + "=" + e.at("args").at("name").str]++;
      continue;
    }
    ASSERT_EQ(e.at("ph").str, "X");
    ++complete;
    if (e.at("name").str == "all_gather") {
      EXPECT_EQ(e.at("tid").num, 1);
      EXPECT_EQ(e.at("cat").str, "communication");
      EXPECT_DOUBLE_EQ(e.at("ts").num, 100.0);
      EXPECT_DOUBLE_EQ(e.at("dur").num, 25.5);
      EXPECT_EQ(e.at("args").at("bytes").num, 4096);
    } else {
      EXPECT_EQ(e.at("name").str, "forward \"block\" 0");
      EXPECT_EQ(e.at("tid").num, 0);
      EXPECT_GE(e.at("dur").num, 0);
    }
  }
  EXPECT_EQ(complete, 2);
  EXPECT_EQ(metadata["process_name:0=rank 3"], 1);
  EXPECT_EQ(metadata["thread_name:0=compute"], 1);
  EXPECT_EQ(metadata["thread_name:1=communication"], 1);
}

TEST(Trace, CounterSamplesAreCEvents) {
  Trace trace(2);
  trace.counter("memory", 10.0, 1024);
  trace.counter("memory", 20.5, 512);
  int counters = 0;
  for (const auto& e : events_of(trace.to_json())) {
    if (e.at("ph").str != "C") continue;
    EXPECT_EQ(e.at("pid").num, 2);
    EXPECT_EQ(e.at("name").str, "memory");
    EXPECT_EQ(e.at("args").at("bytes").num, counters == 0 ? 1024 : 512);
    EXPECT_DOUBLE_EQ(e.at("ts").num, counters == 0 ? 10.0 : 20.5);
    ++counters;
  }
  EXPECT_EQ(counters, 2);
  Trace off(0, false);
  off.counter("memory", 0, 1);
  EXPECT_EQ(off.size(), 0u);
}

TEST(Trace, DisabledRecordsNothing) {
  Trace trace(0, false);
  {
    auto s = trace.span(Track::kCompute, "forward");
  }
  trace.complete(Track::kCompute, "x", 0, 1);
  trace.end(trace.begin(Track::kCommunication, "y"));
  EXPECT_EQ(trace.size(), 0u);
  Trace default_constructed;
  EXPECT_FALSE(default_constructed.enabled());
  EXPECT_EQ(events_of(trace.to_json()).size(), 4u);  // metadata only
}

TEST(Trace, SpansMoveAndFinishOnce) {
  Trace trace(0);
  Trace::Span a = trace.span(Track::kCompute, "a");
  Trace::Span b = std::move(a);
  a.finish();  // moved-from: inert
  b.set_bytes(8);
  b.finish();
  b.finish();
  EXPECT_EQ(trace.size(), 1u);
}

// Compute spans on the training thread while "progress threads" end async communication spans begun
// elsewhere: every event arrives, the JSON stays valid (run under TSan in the thread configuration).
TEST(Trace, ConcurrentRecordingFromSeveralThreads) {
  Trace trace(1);
  constexpr int kThreads = 4;
  constexpr int kEach = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&trace, t] {
      for (int i = 0; i < kEach; ++i) {
        if (t % 2 == 0) {
          auto s = trace.span(Track::kCompute, "block " + std::to_string(i));
        }
      }
      if (t % 2 == 1) {
        std::vector<Trace::Pending> pending;
        for (int i = 0; i < kEach; ++i) {
          pending.push_back(trace.begin(Track::kCommunication, "reduce_scatter " + std::to_string(i)));
        }
        std::thread([&trace, &pending] {
          for (const auto& p : pending) trace.end(p, 64);
        }).join();
      }
    });
  }
  std::string snapshot;
  snapshot = trace.to_json();  // concurrent with recording
  for (auto& th : threads) th.join();
  EXPECT_NO_THROW(json::parse(snapshot));
  EXPECT_EQ(trace.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(events_of(trace.to_json()).size(), static_cast<size_t>(kThreads * kEach + 4));
}

TEST(Trace, MergesRankFilesIntoOneTimeline) {
  const TempDir tmp;
  const std::string dir = tmp.path.string();
  const std::string path = dir + "/trace.json";
  std::vector<std::string> files;
  for (int r = 0; r < 3; ++r) {
    Trace trace(r);
    trace.complete(Track::kCompute, "step", Trace::now_us(), 10);
    trace.complete(Track::kCommunication, "all_gather [x]", Trace::now_us(), 5);
    files.push_back(trace_file_for_rank(path, r));
    trace.write(files.back());
  }
  Trace empty(3);
  files.push_back(trace_file_for_rank(path, 3));
  empty.write(files.back());
  EXPECT_EQ(files[1], dir + "/trace.rank1.json");
  merge_trace_files(files, path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto events = events_of(ss.str());
  std::map<int, int> per_pid;
  for (const auto& e : events) per_pid[static_cast<int>(e.at("pid").num)] += e.at("ph").str == "X";
  EXPECT_EQ(events.size(), 3u * 6 + 4);
  EXPECT_EQ(per_pid[0], 2);
  EXPECT_EQ(per_pid[2], 2);
  EXPECT_EQ(per_pid[3], 0);
  EXPECT_THROW(merge_trace_files({dir + "/missing.json"}, path), std::runtime_error);
  std::ofstream(dir + "/bad.json") << "{\"traceEvents\":[{\"ph\":\"X\"";
  EXPECT_THROW(merge_trace_files({dir + "/bad.json"}, path), std::runtime_error);
}

}  // namespace
}  // namespace fsdp
