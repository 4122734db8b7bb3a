// What the training tests share: a small text to train on and a run's loss curve.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/paths.hpp"

namespace okapi::test {

// examples/story.txt six times over, as <dir>/text.txt: enough windows for a few short steps.
inline std::filesystem::path write_story_text(const std::filesystem::path& dir) {
  const std::string story = read_file(repo_dir() / "examples" / "story.txt");
  const std::filesystem::path path = dir / "text.txt";
  std::ofstream out(path);
  for (int i = 0; i < 6; ++i) out << story << "\n";
  return path;
}

// The rows of a run's train.csv without its timing columns (tokens_per_s, elapsed_s): step, loss,
// lr, grad_norm, eval_loss, eval_ppl, which must not depend on how the run was split or stopped.
inline std::vector<std::string> loss_curve(const std::filesystem::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string field, kept;
    for (int i = 0; std::getline(fields, field, ','); ++i)
      if (i != 4 && i != 5) kept.append(field).append(",");
    rows.push_back(kept);
  }
  return rows;
}

}  // namespace okapi::test
