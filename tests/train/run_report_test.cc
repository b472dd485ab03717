#include "train/run_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "train/metrics.h"

namespace fsdp::train {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The points of the one polyline tagged data-series="id" (-1: none, -2: more than one).
int points_of(const std::string& html, const std::string& id) {
  const std::regex line("data-series=\"" + id + "\"[^>]* points=\"([^\"]*)\"");
  auto it = std::sregex_iterator(html.begin(), html.end(), line);
  if (it == std::sregex_iterator()) return -1;
  const int n = count((*it)[1].str(), ",");
  return ++it == std::sregex_iterator() ? n : -2;
}

RunRecords parse(const std::string& jsonl) {
  std::istringstream in(jsonl);
  return read_run_records(in);
}

// Five steps as fsdp-train writes them: step 3 skipped (loss null), a save after step 2, a recovery
// after step 4 (the record a later issue writes), and the last line cut short by a crash.
constexpr const char* kRun =
    R"({"step":1,"loss":6.1,"grad_norm":0.9,"tps":100,"memory_bytes":2048,"skipped":false,"planned_memory_bytes":2000,"comm_hidden":0.25}
{"step":2,"loss":5.9,"grad_norm":0.8,"tps":200,"memory_bytes":2048,"skipped":false,"planned_memory_bytes":2000,"comm_hidden":0.5}
{"event":"checkpoint","step":2,"rank":0,"elapsed_s":0.1,"detail":"step-2"}
{"step":3,"loss":null,"grad_norm":null,"tps":210,"memory_bytes":2048,"skipped":true,"planned_memory_bytes":2000,"comm_hidden":0.5}
{"step":4,"loss":5.7,"grad_norm":0.7,"tps":220,"memory_bytes":2100,"skipped":false,"planned_memory_bytes":2000,"comm_hidden":0.75}
{"event":"recovery","step":4,"rank":0,"elapsed_s":0.2,"detail":"rank 2 lost; 3 ranks"}
{"step":5,"loss":5.6,"grad_norm":0.6,"tps":230,"memory_bytes":2100,"skipped":false,"planned_memory_bytes":2000,"comm_hidden":0.8}
{"step":6,"loss":5.)";

TEST(RunReport, ReadsStepsEventsAndCountsATornLine) {
  const RunRecords run = parse(kRun);
  ASSERT_EQ(run.steps.size(), 5u);
  ASSERT_EQ(run.events.size(), 2u);
  EXPECT_EQ(run.unreadable_lines, 1);
  EXPECT_EQ(run.events[0].kind, "checkpoint");
  EXPECT_EQ(run.events[1].step, 4);
  EXPECT_EQ(run.events[1].detail, "rank 2 lost; 3 ranks");
  EXPECT_TRUE(run.steps[2].skipped);
  EXPECT_TRUE(std::isnan(run.steps[2].loss));
  EXPECT_DOUBLE_EQ(run.steps[4].comm_hidden, 0.8);
  EXPECT_DOUBLE_EQ(run.steps[0].planned_memory_bytes, 2000);
}

TEST(RunReport, DrawsEverySeriesAndMarksEveryEvent) {
  const std::string html = run_report_html(parse(kRun), "run/metrics.jsonl");
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_EQ(points_of(html, "loss"), 4);  // the skipped step has no loss
  EXPECT_EQ(points_of(html, "grad_norm"), 4);
  EXPECT_EQ(points_of(html, "tps"), 5);
  EXPECT_EQ(points_of(html, "memory"), 5);
  EXPECT_EQ(points_of(html, "planned_memory"), 5);
  EXPECT_EQ(points_of(html, "comm_hidden"), 5);
  EXPECT_EQ(count(html, "<svg "), 5);
  // Each event on each of the five charts.
  EXPECT_EQ(count(html, "data-event=\"checkpoint\""), 5);
  EXPECT_EQ(count(html, "data-event=\"recovery\""), 5);
  EXPECT_EQ(count(html, "data-event=\"skipped\""), 5);
  EXPECT_NE(html.find("<title>recovery 4: rank 2 lost; 3 ranks</title>"), std::string::npos);
  EXPECT_NE(html.find("1 line(s) could not be read"), std::string::npos);
  EXPECT_NE(html.find("planner predicted 1.953 KiB (+5.0%)"), std::string::npos) << html;
  // Self-contained: nothing fetched, nothing run.
  for (const char* outside : {"<script", "src=", "href=", "url(", "@import"}) {
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  }
  EXPECT_EQ(html.find("nan"), std::string::npos);
}

TEST(RunReport, EmptyInputSaysSoWithoutCharts) {
  const std::string html = run_report_html(parse(""), "m.jsonl");
  EXPECT_NE(html.find("No steps recorded yet"), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("</html>"), std::string::npos);
}

TEST(RunReport, OneStepDrawsOnePointPerSeries) {
  const std::string html = run_report_html(
      parse(R"({"step":1,"loss":6.1,"grad_norm":0.9,"tps":100,"memory_bytes":2048,"skipped":false})"), "m.jsonl");
  EXPECT_EQ(points_of(html, "loss"), 1);
  EXPECT_EQ(points_of(html, "tps"), 1);
  EXPECT_EQ(points_of(html, "planned_memory"), -1);  // an older file: no prediction, no line
  EXPECT_NE(html.find("no collective was timed"), std::string::npos);  // an older file, or nothing timed
  EXPECT_EQ(html.find("nan"), std::string::npos);
}

TEST(RunReport, NonFiniteLossesLeaveTheLossChartEmpty) {
  const std::string html = run_report_html(parse("{\"step\":1,\"loss\":null,\"grad_norm\":null,\"skipped\":true}\n"
                                                 "{\"step\":2,\"loss\":null,\"grad_norm\":3,\"skipped\":true}\n"),
                                           "m.jsonl");
  EXPECT_EQ(points_of(html, "loss"), -1);
  EXPECT_EQ(points_of(html, "grad_norm"), 1);
  EXPECT_NE(html.find("final loss</th><td>none"), std::string::npos);
  EXPECT_EQ(count(html, "data-event=\"skipped\""), 1);  // on the grad norm chart, the one drawn
  EXPECT_EQ(html.find("nan"), std::string::npos);
}

TEST(RunReport, FileNamesBesideTheMetrics) {
  EXPECT_EQ(run_report_file("out/metrics.jsonl", 0), "out/report.html");
  EXPECT_EQ(run_report_file("out/metrics.rank2.jsonl", 2), "out/report.rank2.html");
  EXPECT_EQ(run_report_file("metrics.jsonl", 0), "report.html");
  EXPECT_EQ(run_report_file("out/metrics.csv", 0), "");
  EXPECT_EQ(run_report_file("", 0), "");
  EXPECT_NE(write_run_report("/proc/no/such/metrics.jsonl", "/tmp/x.html").find("/proc/no/such/metrics.jsonl"),
            std::string::npos);
}

// What the logger writes is what the report reads: steps with the planner's figure and the hidden
// share, events in the JSONL file (never in CSV), and the page refreshed beside it.
TEST(RunReport, TheLoggersRecordsMakeTheReport) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fsdp_run_report_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::ostringstream console;
  MetricsOptions o;
  o.file = (dir / "metrics.jsonl").string();
  o.out = &console;
  o.planned_memory_bytes = 4096;
  {
    MetricsLogger logger(o);
    for (int64_t s = 1; s <= 3; ++s) {
      StepRecord r{
          .step = s, .loss = 5.0 - 0.1 * s, .grad_norm = 1, .tokens = 10, .step_seconds = 0.5, .memory_bytes = 4000};
      if (s > 1) r.comm_hidden = 0.5;
      logger.log(r);
      if (s == 2) logger.log_event({"checkpoint", 2, "step-2"});
    }
    EXPECT_EQ(refresh_run_report(logger, 0, &console), (dir / "report.html").string());
  }
  std::ifstream in(dir / "metrics.jsonl");
  const RunRecords run = read_run_records(in);
  ASSERT_EQ(run.steps.size(), 3u);
  ASSERT_EQ(run.events.size(), 1u);
  EXPECT_EQ(run.unreadable_lines, 0);
  EXPECT_TRUE(std::isnan(run.steps[0].comm_hidden));  // written as null
  EXPECT_DOUBLE_EQ(run.steps[1].comm_hidden, 0.5);
  EXPECT_DOUBLE_EQ(run.steps[2].planned_memory_bytes, 4096);
  std::ifstream page(dir / "report.html");
  std::stringstream html;
  html << page.rdbuf();
  EXPECT_EQ(points_of(html.str(), "loss"), 3);
  EXPECT_EQ(points_of(html.str(), "comm_hidden"), 2);
  EXPECT_EQ(count(html.str(), "data-event=\"checkpoint\""), 5);

  o.file = (dir / "metrics.csv").string();
  MetricsLogger csv(o);
  csv.log_event({"checkpoint", 2, "step-2"});
  EXPECT_EQ(refresh_run_report(csv, 0, &console), "");
  std::ifstream csv_in(o.file);
  std::string header, extra;
  std::getline(csv_in, header);
  EXPECT_FALSE(std::getline(csv_in, extra));  // the event is not a CSV row
  EXPECT_TRUE(header.ends_with(",planned_memory_bytes,comm_hidden"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fsdp::train
