// --plot: bus bandwidth against message size as a standalone SVG (any browser shows it; no
// plotting tools needed), drawn by common/svg_chart.h. Sizes on a log2 axis, GB/s on a linear one;
// one colour per backend, solid out of place, dashed in place.
#pragma once

#include <string>
#include <vector>

#include "bench/fsdp_bench/report.h"
#include "common/svg_chart.h"

namespace fsdp::bench {

using Series = svg::Series;  // points: (bytes, busbw GB/s)

// One series per backend (and type/op when the run has several), out of place and in place.
std::vector<Series> series_of(const Report& r);

std::string plot_svg(const std::string& title, const std::vector<Series>& series);
inline std::string plot_svg(const Report& r) {
  return plot_svg("fsdp-bench " + std::string(name(r.options.collective)) + ", " + std::to_string(r.nranks) +
                      " ranks: busbw (GB/s) against size",
                  series_of(r));
}

}  // namespace fsdp::bench
