#include "train/plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace okapi::train {
namespace {

constexpr double kWidth = 720, kHeight = 420;
constexpr double kLeft = 60, kRight = 20, kTop = 40, kBottom = 50;

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

std::string loss_curve_svg(const std::vector<CurvePoint>& train, const std::vector<CurvePoint>& held_out,
                           const std::string& title) {
  double x_min = std::numeric_limits<double>::max(), x_max = std::numeric_limits<double>::lowest();
  double y_min = x_min, y_max = x_max;
  for (const auto* series : {&train, &held_out}) {
    for (const CurvePoint& p : *series) {
      if (!std::isfinite(p.loss)) continue;
      x_min = std::min(x_min, static_cast<double>(p.step));
      x_max = std::max(x_max, static_cast<double>(p.step));
      y_min = std::min(y_min, p.loss);
      y_max = std::max(y_max, p.loss);
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
      kWidth, kHeight, kLeft, escape_xml(title));
  const double xs = tick_step(x_max - x_min, 8), ys = tick_step(y_max - y_min, 6);
  for (double x = std::ceil(x_min / xs) * xs; x <= x_max + 1e-9; x += xs) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
                       px(x), kTop, kTop + plot_h, kTop + plot_h + 16, x);
  }
  for (double y = std::ceil(y_min / ys) * ys; y <= y_max + 1e-12; y += ys) {
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:.4g}</text>\n",
                       kLeft, py(y), kLeft + plot_w, kLeft - 6, py(y) + 4, y);
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", kLeft,
                     kTop, plot_w, plot_h);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n", kLeft + plot_w / 2,
                     kHeight - 12);
  if (!train.empty()) {
    svg += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" points=\"";
    for (const CurvePoint& p : train) {
      if (std::isfinite(p.loss)) svg += fmt::format("{:.1f},{:.1f} ", px(static_cast<double>(p.step)), py(p.loss));
    }
    svg += "\"/>\n";
  }
  for (const CurvePoint& p : held_out) {
    if (!std::isfinite(p.loss)) continue;
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"#d62728\"/>\n",
                       px(static_cast<double>(p.step)), py(p.loss));
  }
  svg += fmt::format("<text x=\"{0}\" y=\"{1}\" fill=\"#1f77b4\">train loss</text>"
                     "<text x=\"{0}\" y=\"{2}\" fill=\"#d62728\">held-out loss</text>\n",
                     kLeft + plot_w - 110, kTop + 16, kTop + 32);
  svg += "</svg>\n";
  return svg;
}

}  // namespace okapi::train
