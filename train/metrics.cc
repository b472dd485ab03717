#include "train/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <stdexcept>

#include "common/json.h"
#include "common/output_files.h"

namespace fsdp::train {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

bool ends_with_csv(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
}

std::string csv_number(double v) { return std::isfinite(v) ? json::number(v) : ""; }

}  // namespace

std::string with_thousands(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string python_fixed(double v, int width, int decimals, bool thousands) {
  std::string text;
  if (std::isnan(v)) {
    text = "nan";
  } else if (std::isinf(v)) {
    text = v > 0 ? "inf" : "-inf";
  } else {
    char buf[400];  // DBL_MAX in %f is 309 digits
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
    text = buf;
    if (thousands) {
      const bool negative = text.front() == '-';
      const size_t point = std::min(text.find('.'), text.size());
      const int64_t whole = std::stoll(text.substr(negative ? 1 : 0, point - (negative ? 1 : 0)));
      text = (negative ? "-" : "") + with_thousands(whole) + text.substr(point);
    }
  }
  if (static_cast<int>(text.size()) < width) text.insert(0, static_cast<size_t>(width) - text.size(), ' ');
  return text;
}

void LogInterval::add(const StepRecord& r) {
  tokens += r.tokens;
  seconds += r.step_seconds;
  peak_memory_bytes = std::max(peak_memory_bytes, r.memory_bytes);
}

LogInterval LogInterval::of(const StepRecord& r) {
  LogInterval i;
  i.add(r);
  return i;
}

std::string metrics_file_for_rank(const std::string& path, int64_t rank) {
  return rank == 0 ? path : rank_file_name(path, rank);
}

MetricsLogger::MetricsLogger(MetricsOptions options)
    : options_(std::move(options)), start_(std::chrono::steady_clock::now()) {
  summary_.final_loss = std::numeric_limits<double>::quiet_NaN();
  if (options_.log_freq < 1) options_.log_freq = 1;
  if (options_.file.empty()) return;
  csv_ = ends_with_csv(options_.file);
  const std::filesystem::path parent = std::filesystem::path(options_.file).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  file_.open(options_.file, std::ios::out | (options_.append ? std::ios::app : std::ios::trunc));
  if (!file_) {
    throw std::runtime_error("metrics: cannot open '" + options_.file + "' for writing (metrics.file)" +
                             (ec ? ": " + ec.message() : ""));
  }
  if (csv_ && !options_.append) file_ << csv_header() << '\n' << std::flush;
}

std::ostream& MetricsLogger::out() const { return options_.out != nullptr ? *options_.out : std::cout; }

DerivedMetrics MetricsLogger::derive(const LogInterval& interval) const {
  DerivedMetrics d;
  d.tps = interval.seconds > 0 ? static_cast<double>(interval.tokens) / interval.seconds : 0;
  d.tflops = options_.flops_per_token * d.tps / 1e12;
  d.mfu_pct = options_.peak_flops > 0 ? 100.0 * options_.flops_per_token * d.tps / options_.peak_flops : 0;
  d.memory_gib = static_cast<double>(interval.peak_memory_bytes) / kGiB;
  d.memory_pct = options_.memory_capacity_bytes > 0
                     ? 100.0 * static_cast<double>(interval.peak_memory_bytes) / options_.memory_capacity_bytes
                     : 0;
  return d;
}

DerivedMetrics MetricsLogger::derive(const StepRecord& r) const { return derive(LogInterval::of(r)); }

// TorchTitan's f-string, colours off:
//   f"step: {step:2}  loss: {loss:8.5f}  grad_norm: {grad_norm:7.4f}  memory: {gib:5.2f}GiB({pct:.2f}%)  "
//   f"tps: {round(tps):,}  tflops: {tflops:,.2f}  mfu: {mfu:.2f}%"
std::string MetricsLogger::format_line(const StepRecord& r, const LogInterval& interval) const {
  const DerivedMetrics d = derive(interval);
  std::string step = std::to_string(r.step);
  if (step.size() < 2) step.insert(0, 2 - step.size(), ' ');
  std::string s = "step: " + step;
  s += "  loss: " + python_fixed(r.loss, 8, 5);
  s += "  grad_norm: " + python_fixed(r.grad_norm, 7, 4);
  s += "  memory: " + python_fixed(d.memory_gib, 5, 2) + "GiB(" + python_fixed(d.memory_pct, 0, 2) + "%)";
  s += "  tps: " + with_thousands(static_cast<int64_t>(std::nearbyint(d.tps)));  // round(): half to even
  s += "  tflops: " + python_fixed(d.tflops, 0, 2, true);
  s += "  mfu: " + python_fixed(d.mfu_pct, 0, 2) + "%";
  if (r.skipped) s += "  (skipped: non-finite)";
  return s;
}

std::string MetricsLogger::json_record(const StepRecord& r) const {
  const DerivedMetrics d = derive(r);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string s = "{\"step\":" + std::to_string(r.step);
  s += ",\"loss\":" + json::number(r.loss);
  s += ",\"grad_norm\":" + json::number(r.grad_norm);
  s += ",\"lr\":" + json::number(r.lr);
  s += ",\"tokens\":" + std::to_string(r.tokens);
  s += ",\"step_time_s\":" + json::number(r.step_seconds);
  s += ",\"tps\":" + json::number(d.tps);
  s += ",\"tflops\":" + json::number(d.tflops);
  s += ",\"mfu_pct\":" + json::number(d.mfu_pct);
  s += ",\"memory_bytes\":" + std::to_string(r.memory_bytes);
  s += ",\"memory_pct\":" + json::number(d.memory_pct);
  s += std::string(",\"skipped\":") + (r.skipped ? "true" : "false");
  s += ",\"rank\":" + std::to_string(options_.rank);
  s += ",\"elapsed_s\":" + json::number(elapsed);
  s += ",\"planned_memory_bytes\":" + std::to_string(options_.planned_memory_bytes);
  s += ",\"comm_hidden\":" + json::number(r.comm_hidden);
  return s + "}";
}

std::string MetricsLogger::json_event(const EventRecord& e) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return "{\"event\":" + json::quote(e.kind) + ",\"step\":" + std::to_string(e.step) +
         ",\"rank\":" + std::to_string(options_.rank) + ",\"elapsed_s\":" + json::number(elapsed) +
         ",\"detail\":" + json::quote(e.detail) + "}";
}

void MetricsLogger::log_event(const EventRecord& e) {
  if (file_.is_open() && !csv_) file_ << json_event(e) << '\n' << std::flush;
}

std::string MetricsLogger::csv_header() {
  return "step,loss,grad_norm,lr,tokens,step_time_s,tps,tflops,mfu_pct,memory_bytes,memory_pct,skipped,rank,elapsed_s,"
         "planned_memory_bytes,comm_hidden";
}

std::string MetricsLogger::csv_record(const StepRecord& r) const {
  const DerivedMetrics d = derive(r);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string s = std::to_string(r.step);
  for (double v : {r.loss, r.grad_norm, r.lr}) s += "," + csv_number(v);
  s += "," + std::to_string(r.tokens);
  for (double v : {r.step_seconds, d.tps, d.tflops, d.mfu_pct}) s += "," + csv_number(v);
  s += "," + std::to_string(r.memory_bytes) + "," + csv_number(d.memory_pct);
  s += std::string(",") + (r.skipped ? "1" : "0") + "," + std::to_string(options_.rank) + "," + csv_number(elapsed);
  s += "," + std::to_string(options_.planned_memory_bytes) + "," + csv_number(r.comm_hidden);
  return s;
}

bool MetricsLogger::should_print(const StepRecord& r) const {
  return options_.print && (summary_.steps == 1 || r.skipped || r.step % options_.log_freq == 0);
}

void MetricsLogger::log(const StepRecord& r) {
  ++summary_.steps;
  if (r.skipped) {
    ++summary_.skipped_steps;
  } else {
    summary_.final_loss = r.loss;
  }
  summary_.peak_memory_bytes = std::max(summary_.peak_memory_bytes, r.memory_bytes);
  if (summary_.steps == 1) {
    first_tokens_ = r.tokens;
    first_seconds_ = r.step_seconds;
  } else {
    tokens_after_first_ += r.tokens;
    seconds_after_first_ += r.step_seconds;
  }
  if (file_.is_open()) file_ << (csv_ ? csv_record(r) : json_record(r)) << '\n' << std::flush;
  since_last_line_.add(r);
  if (should_print(r)) {
    out() << format_line(r, since_last_line_) << '\n' << std::flush;
    since_last_line_ = LogInterval{};
  }
}

MetricsSummary MetricsLogger::summary() const {
  MetricsSummary s = summary_;
  const bool past_warmup = s.steps >= 2;
  const double seconds = past_warmup ? seconds_after_first_ : first_seconds_;
  const int64_t tokens = past_warmup ? tokens_after_first_ : first_tokens_;
  s.mean_tps = seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
  s.elapsed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return s;
}

std::string MetricsLogger::format_summary() const {
  const MetricsSummary s = summary();
  StepRecord peak;
  peak.memory_bytes = s.peak_memory_bytes;
  const DerivedMetrics d = derive(peak);
  return "summary: steps: " + std::to_string(s.steps) + " (skipped " + std::to_string(s.skipped_steps) +
         ")  mean tps: " + with_thousands(std::llround(s.mean_tps)) + "  peak memory: " +
         printf_string("%.2f", d.memory_gib) + "GiB(" + printf_string("%.2f", d.memory_pct) +
         "%)  final loss: " + printf_string("%.4f", s.final_loss) + "  elapsed: " +
         printf_string("%.2f", s.elapsed_seconds) + "s";
}

void MetricsLogger::print_summary() {
  if (options_.print) out() << format_summary() << '\n' << std::flush;
}

}  // namespace fsdp::train
