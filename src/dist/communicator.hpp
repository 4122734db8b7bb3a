// Processes working as one over MPI (Open MPI): data-parallel training (train/) and
// pipeline-parallel inference (runtime/pipeline) talk through this class and nothing else includes
// <mpi.h>. Built without MPI (no libopenmpi-dev at configure time), everything here still compiles:
// built_with_mpi() is false and Communicator::world() throws an error saying so.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace okapi::dist {

// Whether this build links MPI.
bool built_with_mpi();
// The number of processes the launcher started, read from its environment (Open MPI's
// OMPI_COMM_WORLD_SIZE, PMIx / Hydra's PMI_SIZE): 1 when not started by mpirun. Works in a build
// without MPI, so that `mpirun -np 2 okapi ...` of such a build is refused rather than run twice.
int launched_world_size();
// Throws the "built without MPI" error when a launcher started several processes but this build
// has no MPI (each would otherwise run the whole job alone); returns otherwise.
void check_launch_supported(int launched_processes, bool with_mpi);

// A message in flight (isend/irecv); wait() before reusing its buffer. Movable, not copyable;
// destroying one that was not waited for waits for it.
class Request {
 public:
  Request() = default;
  Request(Request&& other) noexcept;
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();
  void wait();
  // Whether the message is done (then as after wait()), without blocking: for a caller that waits
  // in its own way (runtime/pipeline sleeps between tests instead of spinning in MPI_Wait).
  bool test();
  bool active() const { return active_; }

 private:
  friend class Communicator;
  uint64_t handle_ = 0;  // the MPI_Request, stored as an integer so no header needs <mpi.h>
  bool active_ = false;
};

// MPI_COMM_WORLD. Every call is collective or point-to-point as MPI defines it; a failure throws
// okapi::Error naming the operation and the peer. Calls may come from any thread but never from
// two at once (MPI_THREAD_SERIALIZED).
class Communicator {
 public:
  // Initializes MPI on first use (finalized at exit). Throws okapi::Error when okapi was built
  // without MPI, or when MPI cannot start.
  static Communicator& world();
  // Whether world() has been initialized in this process.
  static bool initialized();

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string processor_name() const;

  void barrier();
  void send(int dest, int tag, std::span<const std::byte> data);
  // Receives exactly data.size() bytes; a message of another size is an error.
  void recv(int source, int tag, std::span<std::byte> data);
  // Receives a message of any size.
  std::vector<std::byte> recv_any_size(int source, int tag);
  // Whether a message from `source` with `tag` has arrived (MPI_Iprobe), without blocking.
  bool message_waiting(int source, int tag);
  Request isend(int dest, int tag, std::span<const std::byte> data);
  Request irecv(int source, int tag, std::span<std::byte> data);
  // root's bytes to every rank (each passes a buffer of the same size).
  void broadcast(int root, std::span<std::byte> data);
  // Every rank's bytes (sizes may differ) to every rank, in rank order.
  std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> data);
  // Every rank's bytes into `all`, in rank order, rank r's counts[r] bytes long (counts, the same
  // on every rank, sum to all.size(); data.size() == counts[rank()]). No sizes are exchanged and
  // nothing is copied after: for large messages (gradients) whose sizes every rank can compute.
  void all_gather_into(std::span<const std::byte> data, std::span<const size_t> counts, std::span<std::byte> all);
  // Stops every process of the job with `code` (MPI_Abort): what a failing rank does so that the
  // others do not wait forever for it.
  [[noreturn]] void abort(int code);

  // Typed helpers.
  template <typename T>
  void send_values(int dest, int tag, std::span<const T> values) {
    send(dest, tag, std::as_bytes(values));
  }
  template <typename T>
  void recv_values(int source, int tag, std::span<T> values) {
    recv(source, tag, std::as_writable_bytes(values));
  }
  // root's value on every rank.
  template <typename T>
  T broadcast_value(int root, T value) {
    broadcast(root, std::as_writable_bytes(std::span<T>(&value, 1)));
    return value;
  }

 private:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank_ = 0;
  int size_ = 1;
};

// When this process is one rank of several and MPI is initialized: aborts the whole job with
// `code` (after the caller printed its error), so a failure on one rank never leaves the others
// blocked. Otherwise returns.
void abort_job_if_distributed(int code);

// The world when a launcher started this process as one of several (initializing MPI), nullptr
// when it runs alone; throws when it was launched as several but this build has no MPI.
Communicator* join_launched_world();

}  // namespace okapi::dist
