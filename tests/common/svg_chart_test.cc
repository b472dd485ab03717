#include "common/svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <regex>
#include <string>

namespace fsdp::svg {
namespace {

// Occurrences of `what` (no regex characters) in `text`.
int count(const std::string& text, const std::string& what) {
  const std::regex pattern(what);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), pattern), std::sregex_iterator()));
}

// The "x,y" pairs of the polyline tagged data-series="id".
int points_of(const std::string& svg, const std::string& id) {
  std::smatch m;
  if (!std::regex_search(svg, m, std::regex("data-series=\"" + id + "\"[^>]* points=\"([^\"]*)\""))) return -1;
  return count(m[1].str(), ",");
}

TEST(SvgChart, NonFinitePointsAreLeftOutOfTheLine) {
  Chart c;
  c.x.from_zero = false;
  c.series.push_back({.label = "a", .points = {{1, 2}, {2, NAN}, {3, INFINITY}, {4, 1}}, .id = "a"});
  const std::string svg = line_chart(c);
  EXPECT_EQ(points_of(svg, "a"), 2);
  EXPECT_EQ(count(svg, "<circle"), 2);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(SvgChart, MarkersInsideTheRangeAreDrawnWithTheirTooltip) {
  Chart c;
  c.x = {.from_zero = false, .integer = true};
  c.series.push_back({.label = "loss", .points = {{1, 5}, {2, 4}, {3, 3}}});
  c.markers = {{.x = 2, .label = "checkpoint 2", .detail = "step-2", .kind = "checkpoint"},
               {.x = 9, .label = "outside", .kind = "recovery"},
               {.x = 3, .label = "hidden label", .show_label = false, .kind = "skipped"}};
  const std::string svg = line_chart(c);
  EXPECT_EQ(count(svg, "data-event=\"checkpoint\""), 1);
  EXPECT_EQ(count(svg, "data-event=\"recovery\""), 0);
  EXPECT_NE(svg.find("<title>checkpoint 2: step-2</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>hidden label</title>"), std::string::npos);
  EXPECT_EQ(count(svg, ">hidden label</text>"), 0);
}

// Labels of nearby markers go to rows of their own (top row first), four rows at most; a fifth stays a
// tooltip.
TEST(SvgChart, LabelsOfNearbyMarkersTakeRowsOfTheirOwn) {
  Chart c;
  c.x = {.from_zero = false};
  c.series.push_back({.label = "s", .points = {{0, 1}, {100, 2}}});
  for (int i = 0; i < 5; ++i) c.markers.push_back({.x = 10.0 + i, .label = "marker " + std::to_string(i)});
  c.markers.push_back({.x = 60, .label = "far"});
  const std::string svg = line_chart(c);
  for (const char* row : {"y=\"48.0\" font-size=\"10\"", "y=\"60.0\" font-size=\"10\"", "y=\"72.0\" font-size=\"10\"",
                          "y=\"84.0\" font-size=\"10\""}) {
    EXPECT_EQ(count(svg, row), row[3] == '4' ? 2 : 1) << row;  // "far" has the top row to itself again
  }
  EXPECT_EQ(count(svg, ">marker 4</text>"), 0);
  EXPECT_EQ(count(svg, "<title>marker 4</title>"), 1);
}

TEST(SvgChart, OnePointAndNoPointsStillGiveAnAxis) {
  Chart one;
  one.x = {.from_zero = false, .integer = true};
  one.series.push_back({.label = "s", .points = {{7, 3}}, .id = "s"});
  const std::string svg = line_chart(one);
  EXPECT_EQ(points_of(svg, "s"), 1);
  EXPECT_NE(svg.find(">7</text>"), std::string::npos);  // a whole-number tick at the one step
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  const std::string empty = line_chart(Chart{});
  EXPECT_NE(empty.find("</svg>"), std::string::npos);
  EXPECT_EQ(empty.find("nan"), std::string::npos);
}

TEST(SvgChart, Log2AxisTicksArePowersOfTwo) {
  Chart c;
  c.x = {.log2 = true};
  c.series.push_back({.label = "bw", .points = {{1024, 1}, {1 << 20, 10}}});
  const std::string svg = line_chart(c);
  EXPECT_NE(svg.find(">1024</text>"), std::string::npos);
  EXPECT_NE(svg.find(">1.04858e+06</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">1500</text>"), std::string::npos);
}

TEST(SvgChart, TextIsEscaped) {
  Chart c;
  c.title = "a < b & \"c\"";
  EXPECT_NE(line_chart(c).find("a &lt; b &amp; &quot;c&quot;"), std::string::npos);
}

}  // namespace
}  // namespace fsdp::svg
