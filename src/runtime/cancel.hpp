// Cooperative cancellation: a SIGINT handler only sets a flag; the generation and evaluation loops
// check it between tokens / chunks, so Ctrl-C stops cleanly and the caller can still print timings.
#pragma once

namespace okapi::runtime {

// Installs the SIGINT handler (idempotent). A second Ctrl-C while the first is being honoured
// restores the default action, so a stuck process can still be killed.
void install_interrupt_handler();
// Also treats `signal` as a Ctrl-C request (every time; no second-signal default). Open MPI's
// mpirun forwards SIGUSR1 to every rank, while it answers SIGINT by killing the job.
void also_interrupt_on(int signal);
bool interrupt_requested();
void clear_interrupt();

}  // namespace okapi::runtime
