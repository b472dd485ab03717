#include "bench/fsdp_bench/plot.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace fsdp::bench {
namespace {

std::string size_label(double bytes) {
  const char* units[] = {"B", "K", "M", "G"};
  int u = 0;
  while (bytes >= 1024 && u < 3) {
    bytes /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", bytes);
  return buf + std::string(units[u]);
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
        out.push_back({.label = label, .colour = colour[b.name]});
        out.push_back({.label = label + " (in place)", .colour = colour[b.name], .dashed = true});
      }
      if (row.out_of_place.ran) out[it->second].points.emplace_back(row.bytes, row.out_of_place.busbw);
      if (row.in_place.ran) out[it->second + 1].points.emplace_back(row.bytes, row.in_place.busbw);
    }
  }
  std::erase_if(out, [](const Series& s) { return s.points.empty(); });
  return out;
}

std::string plot_svg(const std::string& title, const std::vector<Series>& series) {
  svg::Chart chart;
  chart.title = title;
  chart.x = {.title = "size (bytes)", .log2 = true, .tick_label = size_label};
  chart.y = {.title = "busbw (GB/s)"};
  chart.series = series;
  return svg::line_chart(chart);
}

}  // namespace fsdp::bench
