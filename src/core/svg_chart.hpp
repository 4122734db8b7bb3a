// A line chart as a standalone SVG (white background, grid with "nice" ticks, title, axis labels,
// legend): the training loss curve and `okapi analyze`'s spectra are drawn with it. Non-finite
// points are skipped; an empty chart still draws its frame.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace okapi::svg {

struct Series {
  std::string label;  // legend text ("" for none)
  std::string color;  // any SVG colour, e.g. "#1f77b4"
  std::vector<std::pair<double, double>> points;
  bool markers = false;  // circles at the points instead of a polyline
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool log_y = false;  // y plotted as log10 (non-positive values skipped), ticks labelled 10^k
};

std::string line_chart(const Chart& chart);

// A colour for series i of n on a blue-to-red ramp (layers in order).
std::string ramp_color(size_t i, size_t n);

}  // namespace okapi::svg
