#include "train/plot.hpp"

#include "core/svg_chart.hpp"

namespace okapi::train {

std::string loss_curve_svg(const std::vector<CurvePoint>& train, const std::vector<CurvePoint>& held_out,
                           const std::string& title) {
  svg::Chart chart{title, "step", "loss", {}};
  svg::Series train_series{"train loss", "#1f77b4", {}, false}, held_series{"held-out loss", "#d62728", {}, true};
  for (const CurvePoint& p : train) train_series.points.emplace_back(static_cast<double>(p.step), p.loss);
  for (const CurvePoint& p : held_out) held_series.points.emplace_back(static_cast<double>(p.step), p.loss);
  chart.series = {train_series, held_series};
  return svg::line_chart(chart);
}

}  // namespace okapi::train
