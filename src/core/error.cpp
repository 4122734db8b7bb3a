#include "core/error.hpp"

#include <atomic>
#include <cstdio>

namespace okapi {
namespace {

void print_warning(const std::string& message, Setting /*setting*/) {
  std::fprintf(stderr, "okapi: warning: %s\n", message.c_str());
}

std::atomic<WarningHandler> warning_handler{nullptr};

}  // namespace

WarningHandler set_warning_handler(WarningHandler handler) { return warning_handler.exchange(handler); }

void warn(const std::string& message, Setting setting) {
  const WarningHandler handler = warning_handler.load();
  (handler != nullptr ? handler : print_warning)(message, setting);
}

}  // namespace okapi
