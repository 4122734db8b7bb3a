#include "dist/communicator.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "core/error.hpp"

#ifdef OKAPI_HAVE_MPI
// The C API only: Open MPI's deprecated C++ bindings do not build with -Werror.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace okapi::dist {

namespace {

int env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  return (*end == '\0' && n > 0 && n < 1 << 20) ? static_cast<int>(n) : 0;
}

}  // namespace

int launched_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"})
    if (const int n = env_int(name); n > 0) return n;
  return 1;
}

void check_launch_supported(int launched_processes, bool with_mpi) {
  if (launched_processes > 1 && !with_mpi) {
    throw Error(fmt::format("started as one of {} processes (mpirun), but this okapi was built without MPI: install "
                            "Open MPI (libopenmpi-dev) and rebuild okapi, or run it without mpirun",
                            launched_processes));
  }
}

Communicator* join_launched_world() {
  const int launched = launched_world_size();
  check_launch_supported(launched, built_with_mpi());
  return launched > 1 ? &Communicator::world() : nullptr;
}

#ifdef OKAPI_HAVE_MPI

namespace {

static_assert(sizeof(MPI_Request) <= sizeof(uint64_t), "an MPI_Request must fit the handle");

MPI_Request to_mpi(uint64_t handle) {
  MPI_Request r;
  std::memcpy(&r, &handle, sizeof r);
  return r;
}
uint64_t from_mpi(MPI_Request r) {
  uint64_t handle = 0;
  std::memcpy(&handle, &r, sizeof r);
  return handle;
}

void check(int rc, const char* what, int peer) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(peer >= 0 ? fmt::format("MPI {} with rank {} failed: {}", what, peer, std::string(text, static_cast<size_t>(length)))
                        : fmt::format("MPI {} failed: {}", what, std::string(text, static_cast<size_t>(length))));
}

// MPI counts are int: larger messages go in pieces of at most this many bytes.
constexpr size_t kMaxPiece = size_t{1} << 30;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool built_with_mpi() { return true; }

Request::Request(Request&& other) noexcept
    : handle_(std::exchange(other.handle_, 0)), active_(std::exchange(other.active_, false)) {}
Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    if (active_) {
      MPI_Request r = to_mpi(handle_);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    handle_ = std::exchange(other.handle_, 0);
    active_ = std::exchange(other.active_, false);
  }
  return *this;
}
Request::~Request() {
  if (!active_) return;
  MPI_Request r = to_mpi(handle_);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}
void Request::wait() {
  if (!active_) return;
  MPI_Request r = to_mpi(handle_);
  active_ = false;
  check(MPI_Wait(&r, MPI_STATUS_IGNORE), "wait", -1);
}

bool Request::test() {
  if (!active_) return true;
  MPI_Request r = to_mpi(handle_);
  int done = 0;
  check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "test", -1);
  handle_ = from_mpi(r);  // MPI_Test sets a finished request to MPI_REQUEST_NULL
  if (done != 0) active_ = false;
  return done != 0;
}

namespace {
Communicator* g_world = nullptr;
std::once_flag g_world_once;
}  // namespace

Communicator& Communicator::world() {
  std::call_once(g_world_once, [] {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw Error("MPI could not start (MPI_Init_thread failed)");
    std::atexit(finalize_at_exit);
    // Errors come back as codes (thrown as okapi::Error) instead of aborting inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    g_world = new Communicator(rank, size);  // lives until exit: MPI is finalized by atexit
  });
  return *g_world;
}

bool Communicator::initialized() { return g_world != nullptr; }

std::string Communicator::processor_name() const {
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  check(MPI_Get_processor_name(name, &length), "get_processor_name", -1);
  return std::string(name, static_cast<size_t>(length));
}

void Communicator::barrier() { check(MPI_Barrier(MPI_COMM_WORLD), "barrier", -1); }

void Communicator::send(int dest, int tag, std::span<const std::byte> data) {
  size_t done = 0;
  do {
    const size_t piece = std::min(kMaxPiece, data.size() - done);
    check(MPI_Send(data.data() + done, static_cast<int>(piece), MPI_BYTE, dest, tag, MPI_COMM_WORLD), "send", dest);
    done += piece;
  } while (done < data.size());
}

void Communicator::recv(int source, int tag, std::span<std::byte> data) {
  size_t done = 0;
  do {
    const size_t piece = std::min(kMaxPiece, data.size() - done);
    MPI_Status status;
    check(MPI_Recv(data.data() + done, static_cast<int>(piece), MPI_BYTE, source, tag, MPI_COMM_WORLD, &status),
          "recv", source);
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (static_cast<size_t>(count) != piece)
      throw Error(fmt::format("MPI recv from rank {}: expected {} bytes, got {}", source, piece, count));
    done += piece;
  } while (done < data.size());
}

std::vector<std::byte> Communicator::recv_any_size(int source, int tag) {
  MPI_Status status;
  check(MPI_Probe(source, tag, MPI_COMM_WORLD, &status), "probe", source);
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::vector<std::byte> data(static_cast<size_t>(count));
  check(MPI_Recv(data.data(), count, MPI_BYTE, status.MPI_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "recv",
        source);
  return data;
}

bool Communicator::message_waiting(int source, int tag) {
  int flag = 0;
  check(MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE), "iprobe", source);
  return flag != 0;
}

Request Communicator::isend(int dest, int tag, std::span<const std::byte> data) {
  if (data.size() > kMaxPiece) throw Error(fmt::format("MPI isend of {} bytes: at most {} at once", data.size(), kMaxPiece));
  MPI_Request r;
  check(MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD, &r), "isend", dest);
  Request request;
  request.handle_ = from_mpi(r);
  request.active_ = true;
  return request;
}

Request Communicator::irecv(int source, int tag, std::span<std::byte> data) {
  if (data.size() > kMaxPiece) throw Error(fmt::format("MPI irecv of {} bytes: at most {} at once", data.size(), kMaxPiece));
  MPI_Request r;
  check(MPI_Irecv(data.data(), static_cast<int>(data.size()), MPI_BYTE, source, tag, MPI_COMM_WORLD, &r), "irecv",
        source);
  Request request;
  request.handle_ = from_mpi(r);
  request.active_ = true;
  return request;
}

void Communicator::broadcast(int root, std::span<std::byte> data) {
  size_t done = 0;
  do {
    const size_t piece = std::min(kMaxPiece, data.size() - done);
    check(MPI_Bcast(data.data() + done, static_cast<int>(piece), MPI_BYTE, root, MPI_COMM_WORLD), "broadcast", root);
    done += piece;
  } while (done < data.size());
}

std::vector<std::vector<std::byte>> Communicator::all_gather(std::span<const std::byte> data) {
  if (data.size() > kMaxPiece) throw Error(fmt::format("MPI all_gather of {} bytes: at most {} at once", data.size(), kMaxPiece));
  const int mine = static_cast<int>(data.size());
  std::vector<int> counts(static_cast<size_t>(size_));
  check(MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD), "all_gather", -1);
  std::vector<int> offsets(counts.size());
  size_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (total + static_cast<size_t>(counts[r]) > kMaxPiece)
      throw Error(fmt::format("MPI all_gather of more than {} bytes in all", kMaxPiece));
    offsets[r] = static_cast<int>(total);
    total += static_cast<size_t>(counts[r]);
  }
  std::vector<std::byte> all(total);
  check(MPI_Allgatherv(data.data(), mine, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE,
                       MPI_COMM_WORLD),
        "all_gather", -1);
  std::vector<std::vector<std::byte>> out(counts.size());
  for (size_t r = 0; r < counts.size(); ++r)
    out[r].assign(all.begin() + offsets[r], all.begin() + offsets[r] + counts[r]);
  return out;
}

void Communicator::all_gather_into(std::span<const std::byte> data, std::span<const size_t> counts,
                                   std::span<std::byte> all) {
  size_t total = 0;
  for (const size_t c : counts) total += c;
  if (counts.size() != static_cast<size_t>(size_) || total != all.size() ||
      data.size() != counts[static_cast<size_t>(rank_)])
    throw Error(fmt::format("MPI all_gather_into: {} bytes from rank {} and {} in all do not match the counts",
                            data.size(), rank_, all.size()));
  if (total <= kMaxPiece) {  // one call: MPI's counts and displacements are int
    std::vector<int> sizes(counts.size()), offsets(counts.size());
    size_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      sizes[r] = static_cast<int>(counts[r]);
      offsets[r] = static_cast<int>(offset);
      offset += counts[r];
    }
    check(MPI_Allgatherv(data.data(), sizes[static_cast<size_t>(rank_)], MPI_BYTE, all.data(), sizes.data(),
                         offsets.data(), MPI_BYTE, MPI_COMM_WORLD),
          "all_gather", -1);
    return;
  }
  // Larger: each rank broadcasts its part in turn (broadcast() goes in pieces).
  size_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    const std::span<std::byte> part = all.subspan(offset, counts[r]);
    if (static_cast<int>(r) == rank_) std::memcpy(part.data(), data.data(), data.size());
    if (!part.empty()) broadcast(static_cast<int>(r), part);
    offset += counts[r];
  }
}

void Communicator::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void abort_job_if_distributed(int code) {
  if (Communicator::initialized() && Communicator::world().size() > 1) Communicator::world().abort(code);
}

#else  // built without MPI

namespace {
[[noreturn]] void no_mpi() {
  throw Error("this okapi was built without MPI: install Open MPI (libopenmpi-dev) and rebuild okapi");
}
}  // namespace

bool built_with_mpi() { return false; }
Request::Request(Request&& other) noexcept
    : handle_(std::exchange(other.handle_, 0)), active_(std::exchange(other.active_, false)) {}
Request& Request::operator=(Request&& other) noexcept {
  handle_ = std::exchange(other.handle_, 0);
  active_ = std::exchange(other.active_, false);
  return *this;
}
Request::~Request() = default;
void Request::wait() { active_ = false; }
bool Request::test() {
  active_ = false;
  return true;
}
Communicator& Communicator::world() { no_mpi(); }
bool Communicator::initialized() { return false; }
std::string Communicator::processor_name() const { no_mpi(); }
void Communicator::barrier() { no_mpi(); }
void Communicator::send(int, int, std::span<const std::byte>) { no_mpi(); }
void Communicator::recv(int, int, std::span<std::byte>) { no_mpi(); }
std::vector<std::byte> Communicator::recv_any_size(int, int) { no_mpi(); }
bool Communicator::message_waiting(int, int) { no_mpi(); }
Request Communicator::isend(int, int, std::span<const std::byte>) { no_mpi(); }
Request Communicator::irecv(int, int, std::span<std::byte>) { no_mpi(); }
void Communicator::broadcast(int, std::span<std::byte>) { no_mpi(); }
std::vector<std::vector<std::byte>> Communicator::all_gather(std::span<const std::byte>) { no_mpi(); }
void Communicator::all_gather_into(std::span<const std::byte>, std::span<const size_t>, std::span<std::byte>) {
  no_mpi();
}
void Communicator::abort(int code) { std::_Exit(code); }
void abort_job_if_distributed(int) {}

#endif

}  // namespace okapi::dist
