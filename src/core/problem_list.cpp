#include "core/problem_list.hpp"

namespace okapi {

void ProblemList::add(std::string problem) {
  ++count_;
  if (shown_.size() < max_shown_) shown_.push_back(std::move(problem));
}

std::string ProblemList::summary() const {
  std::string text;
  for (const std::string& problem : shown_) {
    if (!text.empty()) text += "; ";
    text += problem;
  }
  if (count_ > shown_.size()) text += fmt::format("; ... and {} more", count_ - shown_.size());
  return text;
}

}  // namespace okapi
