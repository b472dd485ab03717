#include "train/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <istream>
#include <ostream>

#include "common/atomic_file.h"
#include "common/json.h"
#include "common/output_files.h"
#include "common/svg_chart.h"
#include "train/metrics.h"

namespace fsdp::train {
namespace {

// Memory in the largest binary unit the peak fills at least once: {bytes per unit, its name}.
std::pair<double, const char*> memory_unit(double peak_bytes) {
  constexpr std::pair<double, const char*> kUnits[] = {
      {1024.0 * 1024 * 1024, "GiB"}, {1024.0 * 1024, "MiB"}, {1024.0, "KiB"}};
  for (const auto& u : kUnits) {
    if (peak_bytes >= u.first) return u;
  }
  return {1.0, "B"};
}

double peak_memory(const RunRecords& run) {
  double peak = 0;
  for (const RunStep& s : run.steps) {
    for (double v : {s.memory_bytes, s.planned_memory_bytes}) {
      if (std::isfinite(v)) peak = std::max(peak, v);
    }
  }
  return peak;
}
// Above this many points a series is a bare line (a dot per step would hide it).
constexpr size_t kMaxDots = 60;
// Above this many markers of one kind their labels would overlap: the line's tooltip still names each.
constexpr size_t kMaxLabels = 12;

double number_or_none(const json::Value& line, const char* key) {
  const json::Value* v = line.find(key);
  return v != nullptr && v->kind == json::Value::Kind::kNumber ? v->num : RunStep::kNone;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string step_label(double v) { return fmt("%.0f", v); }

// The events, and the skipped steps, as vertical lines on every chart.
std::vector<svg::Marker> markers_of(const RunRecords& run) {
  std::vector<svg::Marker> out;
  auto count = [&](const std::string& kind) {
    return std::count_if(run.events.begin(), run.events.end(), [&](const RunEvent& e) { return e.kind == kind; });
  };
  for (const RunEvent& e : run.events) {
    svg::Marker m{.x = static_cast<double>(e.step), .kind = e.kind};
    if (e.kind == "checkpoint") {
      m.label = "checkpoint " + std::to_string(e.step);
    } else if (e.kind == "recovery") {
      m.label = "recovery " + std::to_string(e.step), m.colour = "#d62728", m.dashed = false;
    } else {
      m.label = e.kind + " " + std::to_string(e.step), m.colour = "#9467bd";
    }
    m.detail = e.detail;
    m.show_label = static_cast<size_t>(count(e.kind)) <= kMaxLabels;
    out.push_back(std::move(m));
  }
  const auto skipped = std::count_if(run.steps.begin(), run.steps.end(), [](const RunStep& s) { return s.skipped; });
  for (const RunStep& s : run.steps) {
    if (!s.skipped) continue;
    out.push_back({.x = static_cast<double>(s.step),
                   .label = "skipped " + std::to_string(s.step),
                   .detail = "non-finite loss or grad norm",
                   .colour = "#ff7f0e",
                   .show_label = static_cast<size_t>(skipped) <= kMaxLabels,
                   .kind = "skipped"});
  }
  return out;
}

// A series of one field over the steps: the points where it is finite (a skipped step's loss is not).
svg::Series series_of(const RunRecords& run, const std::string& label, const std::string& id, int colour,
                      const std::function<double(const RunStep&)>& value) {
  svg::Series s{.label = label, .colour = colour, .id = id};
  for (const RunStep& r : run.steps) {
    const double v = value(r);
    if (std::isfinite(v)) s.points.emplace_back(static_cast<double>(r.step), v);
  }
  s.dots = s.points.size() <= kMaxDots;
  return s;
}

std::string chart(const std::string& id, const std::string& title, const std::string& y_title,
                  std::vector<svg::Series> series, const std::vector<svg::Marker>& markers, bool from_zero) {
  svg::Chart c;
  c.title = title;
  c.x = {.title = "step", .from_zero = false, .integer = true, .tick_label = step_label};
  c.y = {.title = y_title, .from_zero = from_zero};
  std::erase_if(series, [](const svg::Series& s) { return s.points.empty(); });
  if (series.empty()) {
    return "<section id=\"" + id + "\"><h2>" + svg::escape_xml(title) + "</h2><p class=\"none\">no values in the file" +
           (id == "comm_hidden" ? " (no collective was timed)" : "") + "</p></section>\n";
  }
  c.series = std::move(series);
  c.markers = markers;
  return "<section id=\"" + id + "\">\n" + svg::line_chart(c) + "</section>\n";
}

std::string summary_table(const RunRecords& run) {
  double final_loss = RunStep::kNone, peak = 0, planned = 0;
  double tps_sum = 0, hidden_sum = 0;
  int64_t tps_n = 0, hidden_n = 0, skipped = 0;
  for (size_t i = 0; i < run.steps.size(); ++i) {
    const RunStep& s = run.steps[i];
    skipped += s.skipped;
    if (!s.skipped && std::isfinite(s.loss)) final_loss = s.loss;
    if (std::isfinite(s.memory_bytes)) peak = std::max(peak, s.memory_bytes);
    if (std::isfinite(s.planned_memory_bytes)) planned = std::max(planned, s.planned_memory_bytes);
    if (i > 0 || run.steps.size() == 1) {  // the first step is warm-up
      if (std::isfinite(s.tps)) tps_sum += s.tps, ++tps_n;
      if (std::isfinite(s.comm_hidden)) hidden_sum += s.comm_hidden, ++hidden_n;
    }
  }
  auto row = [](const std::string& k, const std::string& v) {
    return "<tr><th>" + k + "</th><td>" + v + "</td></tr>\n";
  };
  std::string t = "<table class=\"summary\">\n";
  t += row("steps", std::to_string(run.steps.front().step) + " to " + std::to_string(run.steps.back().step) + " (" +
                        std::to_string(run.steps.size()) + ", skipped " + std::to_string(skipped) + ")");
  t += row("final loss", std::isfinite(final_loss) ? fmt("%.4f", final_loss) : "none");
  t += row("mean tokens/s", tps_n > 0 ? fmt("%.0f", tps_sum / static_cast<double>(tps_n)) : "none");
  const auto [unit, unit_name] = memory_unit(std::max(peak, planned));
  t += row("peak memory", fmt("%.3f ", peak / unit) + unit_name +
                              (planned > 0 ? fmt(", planner predicted %.3f ", planned / unit) + unit_name +
                                                 fmt(" (%+.1f%%)", 100 * (peak - planned) / planned)
                                           : ""));
  t += row("communication hidden",
           hidden_n > 0 ? fmt("%.0f%% (mean over steps)", 100 * hidden_sum / static_cast<double>(hidden_n))
                        : "none measured");
  t += row("events", std::to_string(run.events.size()));
  return t + "</table>\n";
}

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:16px;color:#222}h1{font-size:20px}h2{font-size:15px}"
    "table.summary{border-collapse:collapse;margin-bottom:12px}table.summary th{text-align:left;padding:2px 12px 2px 0}"
    "section{margin:8px 0}p.none,p.note{color:#666}";

}  // namespace

RunRecords read_run_records(std::istream& in) {
  RunRecords run;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const json::Value v = json::parse(line);
      if (const json::Value* kind = v.find("event"); kind != nullptr) {
        const json::Value* detail = v.find("detail");
        run.events.push_back({kind->string(), static_cast<int64_t>(v.at("step").number()),
                              detail != nullptr && !detail->is_null() ? detail->string() : ""});
        continue;
      }
      RunStep s;
      s.step = static_cast<int64_t>(v.at("step").number());
      s.loss = number_or_none(v, "loss");
      s.grad_norm = number_or_none(v, "grad_norm");
      s.tps = number_or_none(v, "tps");
      s.memory_bytes = number_or_none(v, "memory_bytes");
      s.planned_memory_bytes = number_or_none(v, "planned_memory_bytes");
      if (!(s.planned_memory_bytes > 0)) s.planned_memory_bytes = RunStep::kNone;  // 0: the writer did not know
      s.comm_hidden = number_or_none(v, "comm_hidden");
      const json::Value* skipped = v.find("skipped");
      s.skipped = skipped != nullptr && skipped->kind == json::Value::Kind::kBool && skipped->b;
      run.steps.push_back(s);
    } catch (const std::exception&) {
      ++run.unreadable_lines;
    }
  }
  return run;
}

std::string run_report_html(const RunRecords& run, const std::string& source) {
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Training run: " +
                     svg::escape_xml(source) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  html += "<h1>Training run: " + svg::escape_xml(source) + "</h1>\n";
  if (run.unreadable_lines > 0) {
    html += "<p class=\"note\">" + std::to_string(run.unreadable_lines) +
            " line(s) could not be read (a line cut short when a run stopped, or not a metrics record).</p>\n";
  }
  if (run.steps.empty()) return html + "<p class=\"none\">No steps recorded yet.</p>\n</body>\n</html>\n";
  html += summary_table(run);
  html +=
      "<p class=\"note\">Marked on every chart: checkpoints (grey, dashed), recoveries (red), skipped steps "
      "(orange). Hover a line for its detail.</p>\n";
  const std::vector<svg::Marker> marks = markers_of(run);
  html +=
      chart("loss", "loss", "loss",
            {series_of(run, "loss", "loss", 0, [](const RunStep& s) { return s.skipped ? RunStep::kNone : s.loss; })},
            marks, false);
  html +=
      chart("grad_norm", "grad norm (before clipping)", "L2 norm",
            {series_of(run, "grad norm", "grad_norm", 1, [](const RunStep& s) { return s.grad_norm; })}, marks, true);
  html += chart("tps", "tokens per second (this rank)", "tokens/s",
                {series_of(run, "tokens/s", "tps", 2, [](const RunStep& s) { return s.tps; })}, marks, true);
  const auto [unit, unit_name] = memory_unit(peak_memory(run));
  svg::Series planned = series_of(run, "planner's prediction", "planned_memory", 4,
                                  [unit](const RunStep& s) { return s.planned_memory_bytes / unit; });
  planned.dashed = true;
  planned.dots = false;
  html +=
      chart("memory", "peak memory per step against the planner's prediction", unit_name,
            {series_of(run, "measured peak", "memory", 3, [unit](const RunStep& s) { return s.memory_bytes / unit; }),
             planned},
            marks, true);
  html += chart("comm_hidden", "communication hidden behind compute", "% of flight time",
                {series_of(run, "hidden", "comm_hidden", 5, [](const RunStep& s) { return 100 * s.comm_hidden; })},
                marks, true);
  return html + "</body>\n</html>\n";
}

std::string write_run_report(const std::string& metrics_file, const std::string& report_file) {
  std::ifstream in(metrics_file);
  if (!in) return "report: cannot read '" + metrics_file + "'";
  const std::string html = run_report_html(read_run_records(in), metrics_file);
  const std::filesystem::path parent = std::filesystem::path(report_file).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const std::string error = write_file_atomically(report_file, html);
  return error.empty() ? "" : "report: " + error;
}

std::string run_report_file(const std::string& metrics_file, int64_t rank) {
  const std::filesystem::path p(metrics_file);
  if (metrics_file.empty() || p.extension() == ".csv") return {};
  const std::string report = (p.parent_path() / "report.html").string();
  return rank == 0 ? report : rank_file_name(report, rank);
}

std::string refresh_run_report(const MetricsLogger& metrics, int64_t rank, std::ostream* log) {
  const std::string report = run_report_file(metrics.file(), rank);
  if (report.empty()) return {};
  const std::string error = write_run_report(metrics.file(), report);
  if (!error.empty() && log != nullptr) *log << "warning: " << error << " (the run goes on)\n";
  return error.empty() ? report : "";
}

}  // namespace fsdp::train
