#include "train/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "tests/train/json_check.h"

namespace fsdp::train {
namespace {

using testing::Json;

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

std::vector<Json> events_of(const std::string& json) {
  const Json doc = testing::parse_json(json);
  EXPECT_EQ(doc.type, Json::Type::kObject);
  return doc["traceEvents"].array;
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
    EXPECT_EQ(e["pid"].number, 3);
    if (e["ph"].string == "M") {
      const std::string key = e["name"].string + ":" + std::to_string(static_cast<int>(e["tid"].number));
      if (e["args"].has("name")) metadata[key + "=" + e["args"]["name"].string]++;
      continue;
    }
    ASSERT_EQ(e["ph"].string, "X");
    ++complete;
    if (e["name"].string == "all_gather") {
      EXPECT_EQ(e["tid"].number, 1);
      EXPECT_EQ(e["cat"].string, "communication");
      EXPECT_DOUBLE_EQ(e["ts"].number, 100.0);
      EXPECT_DOUBLE_EQ(e["dur"].number, 25.5);
      EXPECT_EQ(e["args"]["bytes"].number, 4096);
    } else {
      EXPECT_EQ(e["name"].string, "forward \"block\" 0");
      EXPECT_EQ(e["tid"].number, 0);
      EXPECT_GE(e["dur"].number, 0);
    }
  }
  EXPECT_EQ(complete, 2);
  EXPECT_EQ(metadata["process_name:0=rank 3"], 1);
  EXPECT_EQ(metadata["thread_name:0=compute"], 1);
  EXPECT_EQ(metadata["thread_name:1=communication"], 1);
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
  EXPECT_NO_THROW(testing::parse_json(snapshot));
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
  for (const auto& e : events) per_pid[static_cast<int>(e["pid"].number)] += e["ph"].string == "X";
  EXPECT_EQ(events.size(), 3u * 6 + 4);
  EXPECT_EQ(per_pid[0], 2);
  EXPECT_EQ(per_pid[2], 2);
  EXPECT_EQ(per_pid[3], 0);
  EXPECT_THROW(merge_trace_files({dir + "/missing.json"}, path), std::runtime_error);
  std::ofstream(dir + "/bad.json") << "{\"traceEvents\":[{\"ph\":\"X\"";
  EXPECT_THROW(merge_trace_files({dir + "/bad.json"}, path), std::runtime_error);
}

}  // namespace
}  // namespace fsdp::train
