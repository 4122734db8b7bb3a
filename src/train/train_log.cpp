#include "train/train_log.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace okapi::train {
namespace {

std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  std::string field;
  while (std::getline(in, field, ',')) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

// Parses a complete data row (8 fields, numeric step and loss); a torn last line fails.
bool parse_row(const std::string& line, int64_t* step, double* loss, std::optional<double>* eval_loss) {
  const auto fields = split_commas(line);
  if (fields.size() != 8) return false;
  try {
    size_t used = 0;
    *step = std::stoll(fields[0], &used);
    if (used != fields[0].size()) return false;
    *loss = std::stod(fields[1]);
    *eval_loss = fields[6].empty() ? std::nullopt : std::optional<double>(std::stod(fields[6]));
    return !fields[7].empty() || fields[6].empty();
  } catch (const std::exception&) {
    return false;
  }
}

void write_atomically(const std::filesystem::path& path, const std::string& text) {
  AtomicFileWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace

TrainLog::TrainLog(std::filesystem::path csv, std::filesystem::path svg, std::string title, int64_t keep_through_step)
    : csv_(std::move(csv)), svg_(std::move(svg)), title_(std::move(title)) {
  std::string kept = std::string(kHeader) + "\n";
  if (keep_through_step >= 0) {
    std::ifstream in(csv_);
    std::string line;
    while (std::getline(in, line)) {
      int64_t step = 0;
      double loss = 0;
      std::optional<double> eval;
      if (!parse_row(line, &step, &loss, &eval) || step > keep_through_step) continue;
      kept += line + "\n";
      train_.push_back({step, loss});
      if (eval) held_out_.push_back({step, *eval});
    }
  }
  write_atomically(csv_, kept);
  file_ = std::fopen(csv_.c_str(), "ab");
  if (file_ == nullptr) throw_error("cannot append to '{}': {}", csv_.string(), std::strerror(errno));
}

TrainLog::~TrainLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void TrainLog::append(const LogRow& row) {
  std::string line = fmt::format("{},{:.9g},{:.9g},{:.9g},{:.1f},{:.3f},", row.step, row.loss, row.lr, row.grad_norm,
                                 row.tokens_per_second, row.elapsed_seconds);
  if (row.eval_loss) line += fmt::format("{:.9g},{:.9g}", *row.eval_loss, std::exp(*row.eval_loss));
  else line += ",";
  line += "\n";
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0) {
    throw_error("cannot write to '{}': {}", csv_.string(), std::strerror(errno));
  }
  train_.push_back({row.step, row.loss});
  if (row.eval_loss) held_out_.push_back({row.step, *row.eval_loss});
}

void TrainLog::write_plot() const { write_atomically(svg_, loss_curve_svg(train_, held_out_, title_)); }

}  // namespace okapi::train
