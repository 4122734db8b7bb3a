#include "runtime/cancel.hpp"

#include <csignal>

namespace okapi::runtime {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) {
  if (g_interrupted != 0) std::signal(SIGINT, SIG_DFL);  // second Ctrl-C: default (terminate)
  g_interrupted = 1;
}

extern "C" void on_forwarded_stop_signal(int) { g_interrupted = 1; }

}  // namespace

void also_interrupt_on(int signal) {
  struct sigaction action {};
  action.sa_handler = on_forwarded_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  sigaction(signal, &action, nullptr);
}

void install_interrupt_handler() {
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking write returns and the loop sees the flag
  sigaction(SIGINT, &action, nullptr);
}

bool interrupt_requested() { return g_interrupted != 0; }
void clear_interrupt() { g_interrupted = 0; }

}  // namespace okapi::runtime
