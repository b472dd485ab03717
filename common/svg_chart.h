// Line charts as standalone SVG: no script, no font file, no network, so any browser shows them offline.
// fsdp-bench's bandwidth plots (bench/fsdp_bench/plot.h) and fsdp-train's run report (train/run_report.h)
// both draw through it.
//
//   +-title-------------------------------------+
//   | y ticks |  plot area (series, markers)  | legend
//   |         +-------------------------------+
//   |           x ticks, x title
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fsdp::svg {

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order; non-finite points are left out
  int colour = 0;                                 // index into the palette: series that belong together share one
  bool dashed = false;
  bool dots = true;  // a circle on each point
  std::string id;    // data-series attribute of the polyline ("" : none), for tools that read the page
};

// A vertical line across the plot at x: an event (a checkpoint, a recovery, a skipped step).
struct Marker {
  double x = 0;
  std::string label;   // drawn at the top when `show_label`
  std::string detail;  // the line's tooltip, after the label
  std::string colour = "#888";
  bool dashed = true;
  bool show_label = true;
  std::string kind;  // data-event attribute ("" : none)
};

struct Axis {
  std::string title;
  bool log2 = false;                            // ticks at powers of two (sizes), else linear
  bool from_zero = true;                        // a linear axis starts at 0, else at a round value below the data
  bool integer = false;                         // linear ticks at whole numbers only (steps)
  std::string (*tick_label)(double) = nullptr;  // nullptr: %g
};

struct Chart {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  std::vector<Marker> markers;
  double width = 760, height = 440;
  double legend_width = 200;  // right of the plot area
};

std::string line_chart(const Chart& chart);

// The chart's colours, by index (cycled).
const char* palette(int index);
// Text for an SVG or HTML element or attribute: <, >, & and " escaped.
std::string escape_xml(const std::string& text);

}  // namespace fsdp::svg
