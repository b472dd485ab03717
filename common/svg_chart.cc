#include "common/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fsdp::svg {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

std::string px1(double v) { return fmt("%.1f", v); }

// A "nice" step (1, 2 or 5 times a power of ten) giving about `ticks` intervals over `span`.
double nice_step(double span, int ticks) {
  const double raw = span / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

// Where an axis runs and its ticks: [lo, hi] in data units (log2 of them on a log2 axis), one tick per
// `step` from `first`.
struct Scale {
  double lo = 0, hi = 1, first = 0, step = 1;
  bool log2 = false;
  double map(double v) const { return ((log2 ? std::log2(std::max(v, 1.0)) : v) - lo) / (hi - lo); }
  double tick_value(double t) const { return log2 ? std::pow(2.0, t) : t; }
};

// `headroom`: a value axis, where a line at the maximum would run along the frame: one more step then.
Scale linear_scale(double lo, double hi, bool from_zero, bool integer, bool headroom, int ticks) {
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  double span = hi - lo;
  if (span <= 0) span = std::abs(hi) > 0 ? std::abs(hi) : 1;
  Scale s;
  s.step = nice_step(span, ticks);
  if (integer) s.step = std::max(s.step, 1.0);
  s.lo = s.first = std::floor(lo / s.step) * s.step;
  s.hi = std::max(std::ceil(hi / s.step) * s.step, s.lo + s.step);
  if (headroom && s.hi - hi < 0.01 * s.step) s.hi += s.step;
  return s;
}

// Sizes: whole powers of two, at most about ten ticks.
Scale log2_scale(double lo, double hi) {
  Scale s;
  s.log2 = true;
  s.lo = std::log2(std::max(lo, 1.0));
  s.hi = std::log2(std::max(hi, 1.0));
  if (!(s.lo <= s.hi)) s.lo = 0, s.hi = 1;
  if (s.hi - s.lo < 1) s.hi = s.lo + 1;
  s.first = std::ceil(s.lo);
  s.step = std::max(1.0, std::ceil((s.hi - s.lo) / 10));
  return s;
}

Scale scale_of(const Axis& axis, const std::vector<Series>& series, bool x, int ticks) {
  double lo = INFINITY, hi = -INFINITY;
  for (const Series& s : series) {
    for (auto [px, py] : s.points) {
      const double v = x ? px : py;
      if (!std::isfinite(px) || !std::isfinite(py)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  return axis.log2 ? log2_scale(lo, hi) : linear_scale(lo, hi, axis.from_zero, axis.integer, !x, ticks);
}

std::string tick_text(const Axis& axis, double v) { return axis.tick_label ? axis.tick_label(v) : fmt("%g", v); }

struct Frame {
  double left = 64, top = 36, width = 0, height = 0;  // the plot area
  Scale x, y;
  double px(double v) const { return left + x.map(v) * width; }
  double py(double v) const { return top + height - y.map(v) * height; }
  // A marker label near the right edge runs leftwards, clear of the legend.
  bool leftwards(double x) const { return x > left + 0.75 * width; }
};

std::string grid_and_axes(const Chart& c, const Frame& f) {
  std::string svg;
  for (int i = 0; f.y.first + i * f.y.step <= f.y.hi + 1e-9 * f.y.step; ++i) {
    const double v = f.y.first + i * f.y.step, y = f.top + f.height - (v - f.y.lo) / (f.y.hi - f.y.lo) * f.height;
    svg += "<line x1=\"" + px1(f.left) + "\" x2=\"" + px1(f.left + f.width) + "\" y1=\"" + px1(y) + "\" y2=\"" +
           px1(y) + "\" stroke=\"#ddd\"/>\n";
    svg += "<text x=\"" + px1(f.left - 6) + "\" y=\"" + px1(y + 4) + "\" text-anchor=\"end\">" +
           escape_xml(tick_text(c.y, f.y.tick_value(v))) + "</text>\n";
  }
  for (int i = 0; f.x.first + i * f.x.step <= f.x.hi + 1e-9 * f.x.step; ++i) {
    const double t = f.x.first + i * f.x.step, x = f.left + (t - f.x.lo) / (f.x.hi - f.x.lo) * f.width;
    svg += "<line x1=\"" + px1(x) + "\" x2=\"" + px1(x) + "\" y1=\"" + px1(f.top) + "\" y2=\"" + px1(f.top + f.height) +
           "\" stroke=\"#eee\"/>\n";
    svg += "<text x=\"" + px1(x) + "\" y=\"" + px1(f.top + f.height + 16) + "\" text-anchor=\"middle\">" +
           escape_xml(tick_text(c.x, f.x.tick_value(t))) + "</text>\n";
  }
  svg += "<rect x=\"" + px1(f.left) + "\" y=\"" + px1(f.top) + "\" width=\"" + px1(f.width) + "\" height=\"" +
         px1(f.height) + "\" fill=\"none\" stroke=\"black\"/>\n";
  svg += "<text x=\"" + px1(f.left + f.width / 2) + "\" y=\"" + px1(c.height - 12) + "\" text-anchor=\"middle\">" +
         escape_xml(c.x.title) + "</text>\n";
  svg += "<text transform=\"translate(16," + px1(f.top + f.height / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
         escape_xml(c.y.title) + "</text>\n";
  return svg;
}

// The row (0 = top) each marker's label is drawn in, so that labels of nearby markers do not overlap;
// -1: no room (the line's tooltip still names it). Labels take about 5.5 px per character at 10 px.
std::vector<int> label_rows(const Chart& c, const Frame& f) {
  constexpr int kRows = 4;
  std::vector<size_t> order(c.markers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return c.markers[a].x < c.markers[b].x; });
  std::vector<int> rows(c.markers.size(), -1);
  double right_end[kRows];
  std::fill(right_end, right_end + kRows, -INFINITY);
  for (size_t i : order) {
    const Marker& m = c.markers[i];
    if (!m.show_label || !std::isfinite(m.x)) continue;
    const double x = f.px(m.x), width = 5.5 * static_cast<double>(m.label.size()) + 6;
    const double start = f.leftwards(x) ? x - width : x;
    for (int r = 0; r < kRows; ++r) {
      if (start >= right_end[r]) {
        rows[i] = r;
        right_end[r] = start + width;
        break;
      }
    }
  }
  return rows;
}

std::string markers(const Chart& c, const Frame& f) {
  std::string svg;
  const std::vector<int> rows = label_rows(c, f);
  for (size_t i = 0; i < c.markers.size(); ++i) {
    const Marker& m = c.markers[i];
    if (!std::isfinite(m.x)) continue;
    const double x = f.px(m.x);
    if (x < f.left - 0.05 || x > f.left + f.width + 0.05) continue;
    const std::string tooltip = m.detail.empty() ? m.label : m.label + ": " + m.detail;
    svg += "<g" + (m.kind.empty() ? "" : " data-event=\"" + escape_xml(m.kind) + "\"") + "><title>" +
           escape_xml(tooltip) + "</title><line x1=\"" + px1(x) + "\" x2=\"" + px1(x) + "\" y1=\"" + px1(f.top) +
           "\" y2=\"" + px1(f.top + f.height) + "\" stroke=\"" + m.colour + "\" stroke-width=\"1.5\"" +
           (m.dashed ? " stroke-dasharray=\"4,3\"" : "") + "/>";
    if (rows[i] >= 0) {
      const bool leftwards = f.leftwards(x);
      svg += "<text x=\"" + px1(leftwards ? x - 3 : x + 3) + "\" y=\"" + px1(f.top + 12 + 12 * rows[i]) +
             "\" font-size=\"10\" fill=\"" + m.colour + "\"" + (leftwards ? " text-anchor=\"end\"" : "") + ">" +
             escape_xml(m.label) + "</text>";
    }
    svg += "</g>\n";
  }
  return svg;
}

std::string lines_and_legend(const Chart& c, const Frame& f) {
  std::string svg;
  double ly = f.top + 8;
  for (const Series& s : c.series) {
    const char* colour = palette(s.colour);
    const std::string dash = s.dashed ? " stroke-dasharray=\"6,4\"" : "";
    std::string points, dots;
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      points += px1(f.px(x)) + "," + px1(f.py(y)) + " ";
      if (s.dots) {
        dots += "<circle cx=\"" + px1(f.px(x)) + "\" cy=\"" + px1(f.py(y)) + "\" r=\"2.5\" fill=\"" + colour + "\"/>\n";
      }
    }
    const std::string id = s.id.empty() ? "" : " data-series=\"" + escape_xml(s.id) + "\"";
    svg += "<polyline" + id + " fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\"" + dash + " points=\"" +
           points + "\"/>\n" + dots;
    const double lx = f.left + f.width + 12;
    svg += "<line x1=\"" + px1(lx) + "\" x2=\"" + px1(lx + 24) + "\" y1=\"" + px1(ly) + "\" y2=\"" + px1(ly) +
           "\" stroke=\"" + colour + "\" stroke-width=\"2\"" + dash + "/>\n";
    svg += "<text x=\"" + px1(lx + 30) + "\" y=\"" + px1(ly + 4) + "\">" + escape_xml(s.label) + "</text>\n";
    ly += 18;
  }
  return svg;
}

}  // namespace

const char* palette(int index) { return kPalette[((index % kPaletteSize) + kPaletteSize) % kPaletteSize]; }

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string line_chart(const Chart& c) {
  const double bottom = 52;
  Frame f;
  f.width = c.width - f.left - c.legend_width;
  f.height = c.height - f.top - bottom;
  f.x = scale_of(c.x, c.series, true, 8);
  f.y = scale_of(c.y, c.series, false, 6);

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%g", c.width) + "\" height=\"" +
                    fmt("%g", c.height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + fmt("%g", f.left) + "\" y=\"20\" font-size=\"14\">" + escape_xml(c.title) + "</text>\n";
  svg += grid_and_axes(c, f);
  svg += markers(c, f);
  svg += lines_and_legend(c, f);
  return svg + "</svg>\n";
}

}  // namespace fsdp::svg
