#include "train/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/json.h"

namespace fsdp::train {
namespace {

// A fresh folder for one test, removed when the test ends.
struct TempDir {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("fsdp_train_metrics_" + std::to_string(::getpid()) + "_" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { std::filesystem::remove_all(dir); }
  ~TempDir() { std::filesystem::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

StepRecord record(int64_t step, double loss) {
  StepRecord r;
  r.step = step;
  r.loss = loss;
  r.grad_norm = 1.2345;
  r.lr = 8e-4;
  r.tokens = 12345;
  r.step_seconds = 1.0;
  r.memory_bytes = static_cast<int64_t>(0.05 * 1024 * 1024 * 1024);
  return r;
}

MetricsOptions options(std::ostream& out, const std::string& file = "") {
  MetricsOptions o;
  o.out = &out;
  o.file = file;
  o.flops_per_token = 1e12 * 0.01 / 12345;  // 0.01 TFLOP/s at 12,345 tokens/s
  o.peak_flops = 1e12 * 0.01 / 0.0012;      // so mfu is 0.12%
  o.memory_capacity_bytes = 0.05 * 1024 * 1024 * 1024 / 0.003;  // 0.30%
  return o;
}

// The expected lines are what TorchTitan's f-string (components/metrics.py, v0.2.x, colours off) prints
// for the same numbers, computed with Python 3:
//   f"step: {step:2}  loss: {loss:8.5f}  grad_norm: {grad_norm:7.4f}  memory: {gib:5.2f}GiB({pct:.2f}%)  "
//   f"tps: {round(tps):,}  tflops: {tflops:,.2f}  mfu: {mfu:.2f}%"
TEST(MetricsLogger, LineIsTorchTitans) {
  std::ostringstream out;
  const MetricsLogger logger(options(out));
  EXPECT_EQ(logger.format_line(record(12, 5.4321)),
            "step: 12  loss:  5.43210  grad_norm:  1.2345  memory:  0.05GiB(0.30%)  tps: 12,345  tflops: 0.01  "
            "mfu: 0.12%");
  StepRecord r = record(3, std::numeric_limits<double>::quiet_NaN());
  r.grad_norm = 12.3456789;
  EXPECT_EQ(logger.format_line(r),
            "step:  3  loss:      nan  grad_norm: 12.3457  memory:  0.05GiB(0.30%)  tps: 12,345  tflops: 0.01  "
            "mfu: 0.12%");
  // Our extras come after TorchTitan's fields.
  r.skipped = true;
  EXPECT_TRUE(logger.format_line(r).ends_with("mfu: 0.12%  (skipped: non-finite)")) << logger.format_line(r);
}

TEST(MetricsLogger, LineAveragesTheLogInterval) {
  std::ostringstream out;
  MetricsOptions o = options(out);
  o.log_freq = 3;
  o.flops_per_token = 1e9;  // 1 TFLOP/s at 1,000 tokens/s
  o.peak_flops = 1e15;       // so mfu is 0.10%
  o.memory_capacity_bytes = 0;
  MetricsLogger logger(o);
  const double gib = 1024.0 * 1024 * 1024;
  const struct {
    double seconds;
    double memory_gib;
  } steps[] = {{1.0, 1.0}, {1.0, 2.0}, {3.0, 1.0}, {2.0, 0.5}, {2.0, 0.25}, {2.0, 0.5}};
  for (int64_t s = 1; s <= 6; ++s) {
    StepRecord r = record(s, 2.0);
    r.tokens = 1000;
    r.step_seconds = steps[s - 1].seconds;
    r.memory_bytes = static_cast<int64_t>(steps[s - 1].memory_gib * gib);
    logger.log(r);
  }
  std::istringstream in(out.str());
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u) << out.str();
  // Step 1 alone; steps 2-3: 2,000 tokens in 4 s, peak 2 GiB; steps 4-6: 3,000 tokens in 6 s.
  EXPECT_EQ(lines[0], "step:  1  loss:  2.00000  grad_norm:  1.2345  memory:  1.00GiB(0.00%)  tps: 1,000  tflops: 1.00  "
                      "mfu: 0.10%");
  EXPECT_EQ(lines[1], "step:  3  loss:  2.00000  grad_norm:  1.2345  memory:  2.00GiB(0.00%)  tps: 500  tflops: 0.50  "
                      "mfu: 0.05%");
  EXPECT_EQ(lines[2], "step:  6  loss:  2.00000  grad_norm:  1.2345  memory:  0.50GiB(0.00%)  tps: 500  tflops: 0.50  "
                      "mfu: 0.05%");
}

TEST(Metrics, PythonFixedFormat) {
  // Python 3: f"{-0.000004:8.5f}", f"{float('-nan'):8.5f}", f"{float('inf'):8.5f}", f"{1234567.891:,.2f}",
  // f"{-1234.5:10,.2f}", f"{1234.5:7.4f}", f"{12.345:5.2f}"
  EXPECT_EQ(python_fixed(-0.000004, 8, 5), "-0.00000");
  EXPECT_EQ(python_fixed(-std::numeric_limits<double>::quiet_NaN(), 8, 5), "     nan");
  EXPECT_EQ(python_fixed(std::numeric_limits<double>::infinity(), 8, 5), "     inf");
  EXPECT_EQ(python_fixed(1234567.891, 0, 2, true), "1,234,567.89");
  EXPECT_EQ(python_fixed(-1234.5, 10, 2, true), " -1,234.50");
  EXPECT_EQ(python_fixed(1234.5, 7, 4), "1234.5000");
  EXPECT_EQ(python_fixed(12.345, 5, 2), "12.35");
}

TEST(MetricsLogger, TpsRoundsHalfToEvenAsPythonsRound) {
  std::ostringstream out;
  MetricsOptions o = options(out);
  const MetricsLogger logger(o);
  StepRecord r = record(1, 1.0);
  r.step_seconds = 2.0;
  r.tokens = 24689;  // 12,344.5 tokens/s: Python's round() gives 12344
  EXPECT_NE(logger.format_line(r).find("tps: 12,344  "), std::string::npos) << logger.format_line(r);
  r.tokens = 24691;  // 12,345.5: 12346
  EXPECT_NE(logger.format_line(r).find("tps: 12,346  "), std::string::npos) << logger.format_line(r);
}

TEST(MetricsLogger, PrintsOnLogStepsAndTheFirst) {
  std::ostringstream out;
  MetricsOptions o = options(out);
  o.log_freq = 5;
  MetricsLogger logger(o);
  for (int64_t s = 1; s <= 10; ++s) logger.log(record(s, 3.0));
  std::istringstream in(out.str());
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(lines[0].starts_with("step:  1 "));
  EXPECT_TRUE(lines[1].starts_with("step:  5 "));
  EXPECT_TRUE(lines[2].starts_with("step: 10 "));
}

TEST(MetricsLogger, JsonlRecordsParseBack) {
  std::ostringstream out;
  const TempDir tmp;
  const std::string path = tmp.path("sub/metrics.jsonl");
  {
    MetricsLogger logger(options(out, path));
    logger.log(record(1, 5.5));
    StepRecord bad = record(2, std::numeric_limits<double>::infinity());
    bad.skipped = true;
    logger.log(bad);
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  const auto a = json::parse(lines[0]);
  EXPECT_EQ(a.at("step").num, 1);
  EXPECT_DOUBLE_EQ(a.at("loss").num, 5.5);
  EXPECT_DOUBLE_EQ(a.at("grad_norm").num, 1.2345);
  EXPECT_DOUBLE_EQ(a.at("lr").num, 8e-4);
  EXPECT_EQ(a.at("tokens").num, 12345);
  EXPECT_DOUBLE_EQ(a.at("tps").num, 12345);
  EXPECT_NEAR(a.at("tflops").num, 0.01, 1e-12);
  EXPECT_NEAR(a.at("mfu_pct").num, 0.12, 1e-9);
  EXPECT_NEAR(a.at("memory_pct").num, 0.30, 1e-6);
  EXPECT_FALSE(a.at("skipped").b);
  EXPECT_EQ(a.at("rank").num, 0);
  for (const char* key : {"step_time_s", "memory_bytes", "elapsed_s"}) EXPECT_TRUE(a.find(key) != nullptr) << key;
  const auto b = json::parse(lines[1]);
  EXPECT_TRUE(b.at("loss").is_null());  // Inf has no JSON literal
  EXPECT_TRUE(b.at("skipped").b);
}

TEST(MetricsLogger, CsvHasHeaderAndOneRowPerStep) {
  std::ostringstream out;
  const TempDir tmp;
  const std::string path = tmp.path("metrics.csv");
  {
    MetricsLogger logger(options(out, path));
    logger.log(record(1, 5.5));
    logger.log(record(2, 5.0));
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], MetricsLogger::csv_header());
  EXPECT_TRUE(lines[2].starts_with("2,5,1.2345,0.0008,12345,1,12345,"));
  const auto columns = [](const std::string& l) { return std::count(l.begin(), l.end(), ','); };
  EXPECT_EQ(columns(lines[1]), columns(lines[0]));
}

TEST(MetricsLogger, SummaryLeavesOutTheWarmupStep) {
  std::ostringstream out;
  MetricsLogger logger(options(out));
  StepRecord first = record(1, 6.0);
  first.step_seconds = 10.0;  // compile/warm-up
  logger.log(first);
  StepRecord second = record(2, 4.0);
  second.memory_bytes *= 2;
  logger.log(second);
  StepRecord third = record(3, std::numeric_limits<double>::quiet_NaN());
  third.skipped = true;
  logger.log(third);
  const MetricsSummary s = logger.summary();
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(s.skipped_steps, 1);
  EXPECT_DOUBLE_EQ(s.mean_tps, 12345);
  EXPECT_EQ(s.peak_memory_bytes, second.memory_bytes);
  EXPECT_DOUBLE_EQ(s.final_loss, 4.0);
  const std::string text = logger.format_summary();
  EXPECT_TRUE(text.starts_with("summary: steps: 3 (skipped 1)  mean tps: 12,345  peak memory: 0.10GiB(0.60%)  "
                               "final loss: 4.0000  elapsed: "))
      << text;
}

TEST(MetricsLogger, UnwritableFileNamesThePath) {
  std::ostringstream out;
  try {
    MetricsLogger logger(options(out, "/proc/no/such/metrics.jsonl"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/no/such/metrics.jsonl"), std::string::npos);
  }
}

TEST(Metrics, Helpers) {
  EXPECT_EQ(with_thousands(0), "0");
  EXPECT_EQ(with_thousands(999), "999");
  EXPECT_EQ(with_thousands(1000), "1,000");
  EXPECT_EQ(with_thousands(1234567), "1,234,567");
  EXPECT_EQ(with_thousands(-12345), "-12,345");
  EXPECT_EQ(metrics_file_for_rank("out/m.jsonl", 0), "out/m.jsonl");
  EXPECT_EQ(metrics_file_for_rank("out/m.jsonl", 3), "out/m.rank3.jsonl");
}

}  // namespace
}  // namespace fsdp::train
