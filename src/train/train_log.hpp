// The run's CSV log (<dir>/train.csv) and the loss-curve picture beside it (<dir>/loss.svg).
// One row per step: step,loss,lr,grad_norm,tokens_per_s,elapsed_s,eval_loss,eval_ppl (the eval
// columns are empty except on evaluation steps). Losses are printed with 9 significant digits,
// which round-trips a float, so two runs' curves can be compared exactly as text.
// On resume the rows after the checkpoint's step (written before a kill) are dropped, then the
// log continues.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "train/plot.hpp"

namespace okapi::train {

struct LogRow {
  int64_t step = 0;
  float loss = 0;
  float lr = 0;
  float grad_norm = 0;
  double tokens_per_second = 0;
  double elapsed_seconds = 0;
  std::optional<double> eval_loss;
};

class TrainLog {
 public:
  // keep_through_step < 0: a new run (any old log is replaced); else rows up to that step stay.
  TrainLog(std::filesystem::path csv, std::filesystem::path svg, std::string title, int64_t keep_through_step);
  ~TrainLog();
  TrainLog(const TrainLog&) = delete;
  TrainLog& operator=(const TrainLog&) = delete;

  void append(const LogRow& row);  // written and flushed at once
  void write_plot() const;         // atomically
  const std::filesystem::path& csv_path() const { return csv_; }
  const std::filesystem::path& svg_path() const { return svg_; }

  static constexpr const char* kHeader = "step,loss,lr,grad_norm,tokens_per_s,elapsed_s,eval_loss,eval_ppl";

 private:
  std::filesystem::path csv_, svg_;
  std::string title_;
  std::FILE* file_ = nullptr;
  std::vector<CurvePoint> train_, held_out_;
};

}  // namespace okapi::train
