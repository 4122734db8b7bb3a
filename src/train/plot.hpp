// The loss curve as a self-contained SVG (no fonts or scripts beyond plain text elements): training
// loss per step as a line, held-out loss as dots, linear axes with tick labels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace okapi::train {

struct CurvePoint {
  int64_t step = 0;
  double loss = 0;
};

std::string loss_curve_svg(const std::vector<CurvePoint>& train, const std::vector<CurvePoint>& held_out,
                           const std::string& title);

}  // namespace okapi::train
