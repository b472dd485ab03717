#include "bench/fsdp_bench/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace fsdp::bench {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
                                    "#7f7f7f", "#17becf", "#bcbd22"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

std::string size_label(double bytes) {
  const char* units[] = {"B", "K", "M", "G"};
  int u = 0;
  while (bytes >= 1024 && u < 3) {
    bytes /= 1024;
    ++u;
  }
  return fmt("%g", bytes) + units[u];
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// A "nice" step (1, 2 or 5 times a power of ten) giving about `ticks` intervals up to `top`.
double nice_step(double top, int ticks) {
  const double raw = top / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::vector<Series> series_of(const Report& r) {
  const bool several = r.options.types.size() > 1 || (has_reduction(r.options.collective) && r.options.ops.size() > 1);
  std::map<std::string, int> colour;
  std::vector<Series> out;
  for (const BackendInfo& b : r.backends) {
    if (!b.unavailable.empty()) continue;
    colour.emplace(b.name, static_cast<int>(colour.size()));
    std::map<std::string, size_t> index;  // label -> first of its pair (out of place, in place)
    for (const Row& row : r.rows) {
      if (row.backend != b.name) continue;
      std::string label = b.name;
      if (several) label += " " + std::string(name(row.type)) + (row.has_op ? " " + std::string(name(row.op)) : "");
      auto [it, fresh] = index.emplace(label, out.size());
      if (fresh) {
        out.push_back({label, false, colour[b.name], {}});
        out.push_back({label + " (in place)", true, colour[b.name], {}});
      }
      if (row.out_of_place.ran) out[it->second].points.emplace_back(row.bytes, row.out_of_place.busbw);
      if (row.in_place.ran) out[it->second + 1].points.emplace_back(row.bytes, row.in_place.busbw);
    }
  }
  std::erase_if(out, [](const Series& s) { return s.points.empty(); });
  return out;
}

std::string plot_svg(const std::string& title, const std::vector<Series>& series) {
  const double width = 760, height = 440, left = 64, right = 200, top = 36, bottom = 52;
  const double pw = width - left - right, ph = height - top - bottom;
  double xmin = INFINITY, xmax = -INFINITY, ymax = 0;
  for (const Series& s : series) {
    for (auto [x, y] : s.points) {
      const double lx = std::log2(std::max(x, 1.0));
      xmin = std::min(xmin, lx);
      xmax = std::max(xmax, lx);
      ymax = std::max(ymax, y);
    }
  }
  if (!(xmin <= xmax)) xmin = 0, xmax = 1;
  if (xmax - xmin < 1) xmax = xmin + 1;
  const double ystep = nice_step(ymax > 0 ? ymax : 1, 6);
  const double ytop = std::max(ystep, std::ceil(ymax / ystep) * ystep);
  auto px = [&](double bytes) { return left + (std::log2(std::max(bytes, 1.0)) - xmin) / (xmax - xmin) * pw; };
  auto py = [&](double gbs) { return top + ph - gbs / ytop * ph; };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%g", width) + "\" height=\"" +
                    fmt("%g", height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + fmt("%g", left) + "\" y=\"20\" font-size=\"14\">" + escape(title) + "</text>\n";
  // Grid and axes.
  for (double y = 0; y <= ytop + 1e-9; y += ystep) {
    svg += "<line x1=\"" + fmt("%.1f", left) + "\" x2=\"" + fmt("%.1f", left + pw) + "\" y1=\"" + fmt("%.1f", py(y)) +
           "\" y2=\"" + fmt("%.1f", py(y)) + "\" stroke=\"#ddd\"/>\n";
    svg += "<text x=\"" + fmt("%.1f", left - 6) + "\" y=\"" + fmt("%.1f", py(y) + 4) + "\" text-anchor=\"end\">" +
           fmt("%g", y) + "</text>\n";
  }
  const int xstep = std::max(1, static_cast<int>(std::ceil((xmax - xmin) / 10)));
  for (int lx = static_cast<int>(std::ceil(xmin)); lx <= static_cast<int>(std::floor(xmax)); lx += xstep) {
    const double x = px(std::pow(2.0, lx));
    svg += "<line x1=\"" + fmt("%.1f", x) + "\" x2=\"" + fmt("%.1f", x) + "\" y1=\"" + fmt("%.1f", top) + "\" y2=\"" +
           fmt("%.1f", top + ph) + "\" stroke=\"#eee\"/>\n";
    svg += "<text x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", top + ph + 16) + "\" text-anchor=\"middle\">" +
           size_label(std::pow(2.0, lx)) + "</text>\n";
  }
  svg += "<rect x=\"" + fmt("%.1f", left) + "\" y=\"" + fmt("%.1f", top) + "\" width=\"" + fmt("%.1f", pw) +
         "\" height=\"" + fmt("%.1f", ph) + "\" fill=\"none\" stroke=\"black\"/>\n";
  svg += "<text x=\"" + fmt("%.1f", left + pw / 2) + "\" y=\"" + fmt("%.1f", height - 12) +
         "\" text-anchor=\"middle\">size (bytes)</text>\n";
  svg += "<text transform=\"translate(16," + fmt("%.1f", top + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">busbw (GB/s)</text>\n";
  // Lines and legend.
  double ly = top + 8;
  for (const Series& s : series) {
    const char* colour = kPalette[s.colour % kPaletteSize];
    const std::string dash = s.dashed ? " stroke-dasharray=\"6,4\"" : "";
    std::string points;
    for (auto [x, y] : s.points) points += fmt("%.1f", px(x)) + "," + fmt("%.1f", py(y)) + " ";
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(colour) + "\" stroke-width=\"2\"" + dash + " points=\"" +
           points + "\"/>\n";
    for (auto [x, y] : s.points) {
      svg += "<circle cx=\"" + fmt("%.1f", px(x)) + "\" cy=\"" + fmt("%.1f", py(y)) + "\" r=\"2.5\" fill=\"" + colour +
             "\"/>\n";
    }
    const double lx = left + pw + 12;
    svg += "<line x1=\"" + fmt("%.1f", lx) + "\" x2=\"" + fmt("%.1f", lx + 24) + "\" y1=\"" + fmt("%.1f", ly) +
           "\" y2=\"" + fmt("%.1f", ly) + "\" stroke=\"" + colour + "\" stroke-width=\"2\"" + dash + "/>\n";
    svg += "<text x=\"" + fmt("%.1f", lx + 30) + "\" y=\"" + fmt("%.1f", ly + 4) + "\">" + escape(s.label) + "</text>\n";
    ly += 18;
  }
  return svg + "</svg>\n";
}

}  // namespace fsdp::bench
