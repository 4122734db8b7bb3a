#include "core/svg_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace okapi::svg {
namespace {

constexpr double kWidth = 720, kHeight = 420;
constexpr double kLeft = 64, kRight = 20, kTop = 40, kBottom = 50;

std::string escape_xml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A "nice" tick spacing (1, 2 or 5 times a power of ten) giving about `target` ticks over span.
double tick_step(double span, int target) {
  if (!(span > 0)) return 1;
  const double raw = span / target;
  const double base = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * base) return m * base;
  }
  return 10 * base;
}

}  // namespace

std::string ramp_color(size_t i, size_t n) {
  const double t = n > 1 ? static_cast<double>(i) / static_cast<double>(n - 1) : 0.0;
  const auto channel = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 1.0) * 255)); };
  return fmt::format("#{:02x}{:02x}{:02x}", channel(0.12 + 0.72 * t), channel(0.47 - 0.32 * t), channel(0.71 - 0.55 * t));
}

std::string line_chart(const Chart& chart) {
  const auto y_of = [&](double y) { return chart.log_y ? (y > 0 ? std::log10(y) : std::nan("")) : y; };
  double x_min = std::numeric_limits<double>::max(), x_max = std::numeric_limits<double>::lowest();
  double y_min = x_min, y_max = x_max;
  for (const Series& s : chart.series) {
    for (const auto& [x, y0] : s.points) {
      const double y = y_of(y0);
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_min = std::min(y_min, y);
      y_max = std::max(y_max, y);
    }
  }
  if (x_min > x_max) x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  if (x_max == x_min) x_max = x_min + 1;
  if (y_max == y_min) y_max = y_min + 1;
  const double y_pad = 0.05 * (y_max - y_min);
  y_min -= y_pad;
  y_max += y_pad;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const auto px = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * plot_w; };
  const auto py = [&](double y) { return kTop + (1.0 - (y - y_min) / (y_max - y_min)) * plot_h; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" font-size=\"14\">{3}</text>\n",
      kWidth, kHeight, kLeft, escape_xml(chart.title));
  const double xs = tick_step(x_max - x_min, 8), ys = tick_step(y_max - y_min, 6);
  for (double x = std::ceil(x_min / xs) * xs; x <= x_max + 1e-9; x += xs) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
                       px(x), kTop, kTop + plot_h, kTop + plot_h + 16, std::fabs(x) < 1e-9 * xs ? 0.0 : x);
  }
  for (double y = std::ceil(y_min / ys) * ys; y <= y_max + 1e-12; y += ys) {
    const double shown = std::fabs(y) < 1e-9 * ys ? 0.0 : y;  // no "-0" where a tick lands on zero
    const std::string label = chart.log_y ? fmt::format("1e{:g}", shown) : fmt::format("{:.4g}", shown);
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
                       kLeft, py(y), kLeft + plot_w, kLeft - 6, py(y) + 4, label);
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", kLeft,
                     kTop, plot_w, plot_h);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + plot_w / 2, kHeight - 12,
                     escape_xml(chart.x_label));
  svg += fmt::format("<text x=\"14\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {0})\">{1}</text>\n",
                     kTop + plot_h / 2, escape_xml(chart.y_label));
  int legend_row = 0;
  for (const Series& s : chart.series) {
    if (s.markers) {
      for (const auto& [x, y0] : s.points) {
        const double y = y_of(y0);
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(x), py(y), s.color);
      }
    } else if (!s.points.empty()) {
      svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.2\" points=\"", s.color);
      for (const auto& [x, y0] : s.points) {
        const double y = y_of(y0);
        if (std::isfinite(x) && std::isfinite(y)) svg += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
      }
      svg += "\"/>\n";
    }
    if (!s.label.empty()) {
      svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\" text-anchor=\"end\">{}</text>\n", kLeft + plot_w - 8,
                         kTop + 16 + 16 * legend_row++, s.color, escape_xml(s.label));
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace okapi::svg
