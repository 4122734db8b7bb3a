#include "server/http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace okapi::server::http {

namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kDefaultMaxConnections = 4096;
constexpr auto kLingerTime = std::chrono::milliseconds(2000);
// Clients that write the whole body before reading (cpp-httplib, curl) see the answer only if the
// body is read: up to this much is dropped, within kLingerTime.
constexpr size_t kLingerBytes = size_t{64} << 20;
// After a request with a body this large, free memory goes back to the system (glibc keeps it in
// per-thread arenas otherwise: hostile bodies grew an idle server's RSS 17-fold).
constexpr size_t kTrimAfterBodyBytes = 256 * 1024;

uint32_t epoll_flags_for_reading() { return EPOLLIN | EPOLLRDHUP; }

// The process may open this many files: raised to the hard limit so that the connection cap, not
// the file limit, decides.
size_t raise_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? size_t{1} << 20 : static_cast<size_t>(limit.rlim_cur);
}

std::string head_of(const Response& r, bool chunked, size_t length, bool keep_alive, bool http10) {
  std::string head = fmt::format("HTTP/1.{} {} {}\r\n", http10 ? 0 : 1, r.status, status_text(r.status));
  if (!r.content_type.empty()) head += fmt::format("Content-Type: {}\r\n", r.content_type);
  for (const auto& [name, value] : r.headers) head += fmt::format("{}: {}\r\n", name, value);
  if (chunked)
    head += "Transfer-Encoding: chunked\r\n";
  else if (length != std::string::npos)
    head += fmt::format("Content-Length: {}\r\n", length);
  head += keep_alive ? (http10 ? "Connection: keep-alive\r\n" : "") : "Connection: close\r\n";
  head += "\r\n";
  return head;
}

}  // namespace

struct Server::Connection {
  int fd = -1;
  RequestParser parser;
  std::string input;  // bytes read and not yet parsed (a pipelined request)
  Clock::time_point deadline;
  Clock::time_point opened;
  bool sent_continue = false;
  bool lingering = false;  // answered an error: reading and dropping until the client closes
  size_t lingered = 0;
  size_t charged_body = 0;  // counted in buffered_body_bytes_
  enum class Phase { Idle, Head, Body } phase = Phase::Idle;

  explicit Connection(ParseLimits limits) : parser(limits) {}
};

Server::Server(ServerOptions options, Application app) : options_(std::move(options)), app_(std::move(app)) {
  const size_t file_limit = raise_file_limit();
  const size_t wanted = options_.max_connections > 0 ? options_.max_connections : kDefaultMaxConnections;
  // Room for the model, the listener, the loop's own descriptors and a margin.
  max_connections_ = std::max<size_t>(8, std::min(wanted, file_limit > 160 ? file_limit - 128 : 32));
}

Server::~Server() {
  stop();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
  for (auto& c : by_fd_)
    if (c) ::close(c->fd);
  for (const int fd : listen_fds_) ::close(fd);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

namespace {

// One listening socket on host:port; -1 with errno set when no address of the host could be bound.
int listen_on(const std::string& host, int port, bool v6_only) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0)
    throw_error("cannot listen on {}:{}: {}", host, port, ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  int last_errno = 0;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    // SO_REUSEADDR only lets a restarted server bind past its old TIME_WAIT connections; on Linux it
    // never lets two listeners share a port (SO_REUSEPORT would, and is not set).
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // Several addresses: an IPv6 socket listens on IPv6 only, so "0.0.0.0,::" binds both without a clash.
    if (v6_only && a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) return fd;
    last_errno = errno;
    ::close(fd);
  }
  if (last_errno == EADDRINUSE) throw_error("cannot listen on {}:{}: port {} is already in use", host, port, port);
  throw_error("cannot listen on {}:{}: {}", host, port, std::strerror(last_errno));
}

}  // namespace

int Server::bind() {
  // "127.0.0.1,::1": a socket on each address, all on one port (port 0: the first one's).
  std::vector<std::string> hosts;
  for (size_t begin = 0; begin <= options_.host.size();) {
    size_t end = options_.host.find(',', begin);
    if (end == std::string::npos) end = options_.host.size();
    std::string host = options_.host.substr(begin, end - begin);
    while (!host.empty() && host.front() == ' ') host.erase(host.begin());
    while (!host.empty() && host.back() == ' ') host.pop_back();
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (!host.empty()) hosts.push_back(std::move(host));
    begin = end + 1;
  }
  if (hosts.empty()) throw_error("cannot listen: no address in '{}'", options_.host);
  int port = options_.port;
  for (const std::string& host : hosts) {
    listen_fds_.push_back(listen_on(host, port, hosts.size() > 1));
    if (port == 0) {
      sockaddr_storage bound{};
      socklen_t bound_size = sizeof(bound);
      ::getsockname(listen_fds_.back(), reinterpret_cast<sockaddr*>(&bound), &bound_size);
      port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
  }

  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) throw_error("cannot create the server's event loop: {}", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  for (const int fd : listen_fds_) {
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return port;
}

void Server::stop() {
  {
    // Under the workers' mutex: a worker between checking stopping_ and blocking on work_ready_
    // would otherwise miss the notification and never return (a hang at shutdown under load).
    std::lock_guard lock(mutex_);
    if (stopping_.exchange(true)) return;
  }
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
  work_ready_.notify_all();
}

void Server::run() {
  for (int i = 0; i < std::max(1, options_.worker_threads); ++i) workers_.emplace_back([this] { worker_loop(); });
  std::vector<epoll_event> events(256);
  auto next_check = Clock::now();
  while (!stopping_.load()) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 100);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (std::find(listen_fds_.begin(), listen_fds_.end(), fd) != listen_fds_.end()) {
        accept_all(fd);
      } else if (fd == wake_fd_) {
        uint64_t count = 0;
        [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &count, sizeof(count));
      } else if (static_cast<size_t>(fd) < by_fd_.size() && by_fd_[fd]) {
        on_readable(*by_fd_[fd]);
      }
    }
    take_returned();
    const auto now = Clock::now();
    if (now >= next_check) {
      check_deadlines(now);
      next_check = now + std::chrono::milliseconds(100);
    }
  }
  // Stopping: no more reading; workers finish what they hold and close it.
  for (auto& c : by_fd_)
    if (c) close_connection(c->fd);
  work_ready_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
  take_returned();
}

void Server::accept_all(int listen_fd) {
  for (int i = 0; i < 256; ++i) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        if (!evict_one()) return;
        continue;
      }
      return;  // EAGAIN, or a connection that went away before it was accepted
    }
    size_t busy = 0;
    {
      std::lock_guard lock(mutex_);
      busy = busy_connections_;
    }
    if (loop_connections_ + busy >= max_connections_ && !evict_one()) {
      // Every connection is busy with a request: this one cannot be served now.
      static constexpr std::string_view kBusy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n";
      [[maybe_unused]] const ssize_t w = ::send(fd, kBusy.data(), kBusy.size(), MSG_NOSIGNAL);
      ::close(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>(options_.limits);
    c->fd = fd;
    c->opened = Clock::now();
    c->deadline = c->opened + options_.header_timeout;
    epoll_event ev{};
    ev.events = epoll_flags_for_reading();
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    if (by_fd_.size() <= static_cast<size_t>(fd)) by_fd_.resize(static_cast<size_t>(fd) + 64);
    by_fd_[fd] = std::move(c);
    ++loop_connections_;
    open_connections_.fetch_add(1);
  }
}

// The oldest connection that has not sent a whole request (slow or idle) is closed.
bool Server::evict_one() {
  Connection* oldest = nullptr;
  for (auto& c : by_fd_)
    if (c && (!oldest || c->opened < oldest->opened)) oldest = c.get();
  if (!oldest) return false;
  close_connection(oldest->fd);
  return true;
}

void Server::close_connection(int fd) {
  auto& slot = by_fd_[fd];
  if (!slot) return;
  buffered_body_bytes_ -= slot->charged_body;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  slot.reset();
  --loop_connections_;
  open_connections_.fetch_sub(1);
}

void Server::on_readable(Connection& c) {
  char buffer[kReadChunk];
  const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    close_connection(c.fd);
    return;
  }
  if (n < 0) return;
  if (c.lingering) {
    c.lingered += static_cast<size_t>(n);
    if (c.lingered > kLingerBytes) close_connection(c.fd);
    return;
  }
  c.input.append(buffer, static_cast<size_t>(n));
  process_input(c);
}

void Server::process_input(Connection& c) {
  const int fd = c.fd;
  while (!c.input.empty()) {
    const size_t used = c.parser.feed(c.input);
    c.input.erase(0, used);
    const auto state = c.parser.state();
    if (c.phase == Connection::Phase::Idle && c.parser.started()) {
      c.phase = Connection::Phase::Head;
      c.deadline = Clock::now() + options_.header_timeout;
    }
    if (state == RequestParser::State::Error) {
      fail_connection(c, c.parser.error_status(), c.parser.error_message());
      return;
    }
    if (state == RequestParser::State::Body) {
      if (c.phase != Connection::Phase::Body) {
        c.phase = Connection::Phase::Body;
        c.deadline = Clock::now() + options_.body_timeout;
      }
      // Charge what this body will hold against the shared budget before reading it.
      const size_t charge = std::max(c.parser.announced_body_bytes(), c.parser.buffered_body_bytes());
      if (charge > c.charged_body) {
        if (buffered_body_bytes_ + (charge - c.charged_body) > options_.max_buffered_body_bytes) {
          fail_connection(c, 503, "the server is receiving too many request bodies; retry later");
          return;
        }
        buffered_body_bytes_ += charge - c.charged_body;
        c.charged_body = charge;
      }
      if (c.parser.expects_continue() && !c.sent_continue) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        [[maybe_unused]] const ssize_t w = ::send(fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL);
        c.sent_continue = true;
      }
    }
    if (state != RequestParser::State::Complete) return;
    if (!dispatch(c)) return;  // the connection is now a worker's, or closed
  }
}

void Server::fail_connection(Connection& c, int status, const std::string& message) {
  Response r = app_.error_response ? app_.error_response(status, message) : Response{};
  r.status = status;
  if (status == 503) r.set_header("Retry-After", "1");
  answer_from_loop(c, std::move(r), false);
}

bool Server::answer_from_loop(Connection& c, Response&& response, bool keep_alive, bool head_only) {
  std::string text = head_of(response, false, response.body.size(), keep_alive, false);
  if (!head_only) text += response.body;
  // Small answers: all of it fits the socket's buffer, or the client is not reading and is dropped.
  const ssize_t sent = ::send(c.fd, text.data(), text.size(), MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(text.size())) {
    close_connection(c.fd);
    return false;
  }
  if (!keep_alive) {
    start_lingering_close(c);
    return false;
  }
  c.phase = Connection::Phase::Idle;
  c.deadline = Clock::now() + options_.idle_timeout;
  c.sent_continue = false;
  buffered_body_bytes_ -= c.charged_body;
  c.charged_body = 0;
  return true;
}

// Closing at once with unread request bytes makes the kernel reset the connection, and the client
// may lose the error response: shut down our side and drop what the client still sends, briefly.
void Server::start_lingering_close(Connection& c) {
  ::shutdown(c.fd, SHUT_WR);
  c.lingering = true;
  c.input.clear();
  c.input.shrink_to_fit();
  c.parser = RequestParser(options_.limits);
  buffered_body_bytes_ -= c.charged_body;
  c.charged_body = 0;
  c.deadline = Clock::now() + kLingerTime;
}

void Server::check_deadlines(Clock::time_point now) {
  for (auto& c : by_fd_) {
    if (!c || now < c->deadline) continue;
    if (c->lingering || c->phase == Connection::Phase::Idle)
      close_connection(c->fd);
    else
      fail_connection(*c, 408, c->phase == Connection::Phase::Head ? "the request headers took too long"
                                                                     : "the request body took too long");
  }
}

bool Server::dispatch(Connection& c) {
  Request request = c.parser.take();
  Response response;
  if (app_.answer_on_loop && app_.answer_on_loop(request, response)) {
    const bool keep = request.keep_alive && !response.close_connection;
    return answer_from_loop(c, std::move(response), keep, request.method == "HEAD");
  }
  const int fd = c.fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  std::unique_ptr<Connection> owned = std::move(by_fd_[fd]);
  --loop_connections_;
  buffered_body_bytes_ -= owned->charged_body;
  owned->charged_body = 0;
  {
    std::lock_guard lock(mutex_);
    ++busy_connections_;
    tasks_.emplace_back(std::move(owned), std::move(request));
  }
  work_ready_.notify_one();
  return false;
}

void Server::take_returned() {
  std::vector<std::unique_ptr<Connection>> back;
  {
    std::lock_guard lock(mutex_);
    back.swap(returned_);
  }
  for (auto& c : back) {
    const int fd = c->fd;
    if (stopping_.load()) {
      ::close(fd);
      open_connections_.fetch_sub(1);
      continue;
    }
    epoll_event ev{};
    ev.events = epoll_flags_for_reading();
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      open_connections_.fetch_sub(1);
      continue;
    }
    c->phase = Connection::Phase::Idle;
    c->sent_continue = false;
    c->deadline = Clock::now() + options_.idle_timeout;
    Connection& ref = *c;
    by_fd_[fd] = std::move(c);
    ++loop_connections_;
    process_input(ref);  // a request the client pipelined behind the last one
  }
}

void Server::give_back(std::unique_ptr<Connection> c) {
  {
    std::lock_guard lock(mutex_);
    --busy_connections_;
    returned_.push_back(std::move(c));
  }
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void Server::worker_loop() {
  for (;;) {
    std::unique_ptr<Connection> c;
    Request request;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [this] { return !tasks_.empty() || stopping_.load(); });
      if (tasks_.empty()) return;
      c = std::move(tasks_.front().first);
      request = std::move(tasks_.front().second);
      tasks_.pop_front();
    }
    handle(std::move(c), std::move(request));
  }
}

void Server::handle(std::unique_ptr<Connection> c, Request request) {
  Response response;
  try {
    app_.dispatch(request, response);
  } catch (const std::exception& e) {
    response = app_.error_response ? app_.error_response(500, e.what()) : Response{};
    response.status = 500;
  }
  const bool keep = write_response(*c, request, response) && request.keep_alive && !response.close_connection;
  const bool trim = request.body.size() >= kTrimAfterBodyBytes;
  request = Request{};
  response = Response{};
  if (trim) ::malloc_trim(0);
  if (keep && !stopping_.load()) {
    give_back(std::move(c));
    return;
  }
  ::close(c->fd);
  open_connections_.fetch_sub(1);
  std::lock_guard lock(mutex_);
  --busy_connections_;
}

namespace {

// Blocking writes on a non-blocking socket, each with the write timeout for progress.
class SocketWriter final : public StreamSink {
 public:
  SocketWriter(int fd, std::chrono::milliseconds timeout, bool chunked, const std::atomic<bool>& stopping)
      : fd_(fd), timeout_(timeout), chunked_(chunked), stopping_(stopping) {}

  bool send_all(std::string_view data) {
    while (!data.empty()) {
      if (stopping_.load()) return false;
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd_, POLLOUT, 0};
        // Wait in short steps so that a stop is noticed.
        const auto deadline = std::chrono::steady_clock::now() + timeout_;
        int ready = 0;
        while (ready == 0 && std::chrono::steady_clock::now() < deadline && !stopping_.load())
          ready = ::poll(&p, 1, 100);
        if (ready <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
        continue;
      }
      return false;
    }
    return true;
  }
  // The response head, sent with the first bytes of the body (or with its end) instead of at once.
  void hold_head(std::string head) { held_head_ = std::move(head); }
  bool write(std::string_view data) override {
    if (failed_ || done_) return false;
    if (data.empty()) return true;
    bool ok = send_held_head();
    if (chunked_) {
      ok = ok && send_all(fmt::format("{:x}\r\n", data.size())) && send_all(data) && send_all("\r\n");
    } else {
      ok = ok && send_all(data);
    }
    failed_ = !ok;
    return ok;
  }
  void done() override {
    if (done_ || failed_) return;
    done_ = true;
    if (!send_held_head() || (chunked_ && !send_all("0\r\n\r\n"))) failed_ = true;
  }
  bool is_done() const { return done_; }
  bool failed() const { return failed_; }
  // The client closed its side (or reset): nobody reads what is produced.
  bool client_gone() const {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return true;
    char byte = 0;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

 private:
  int fd_;
  std::chrono::milliseconds timeout_;
  bool chunked_;
  const std::atomic<bool>& stopping_;
  std::string held_head_;
  bool failed_ = false;
  bool done_ = false;

  bool send_held_head() {
    if (held_head_.empty()) return true;
    const std::string head = std::move(held_head_);
    held_head_.clear();
    return send_all(head);
  }
};

}  // namespace

bool Server::write_response(Connection& c, const Request& request, Response& response) {
  const bool http10 = request.minor_version == 0;
  const bool head_only = request.method == "HEAD";
  if (response.await) {
    const SocketWriter probe(c.fd, options_.write_timeout, false, stopping_);
    for (;;) {
      if (stopping_.load() || probe.client_gone()) {
        if (response.on_stream_end) response.on_stream_end(false);
        return false;
      }
      if (response.await(response)) break;
    }
    response.await = nullptr;
  }
  if (!response.stream) {
    const bool keep = request.keep_alive && !response.close_connection;
    SocketWriter writer(c.fd, options_.write_timeout, false, stopping_);
    std::string text = head_of(response, false, response.body.size(), keep, http10);
    if (!head_only) text += response.body;
    const bool ok = writer.send_all(text);
    if (response.on_stream_end) response.on_stream_end(ok);
    return ok;
  }
  // HTTP/1.0 has no chunked coding: the body ends when the connection closes.
  const bool chunked = !http10;
  if (!chunked) response.close_connection = true;
  const bool keep = request.keep_alive && !response.close_connection;
  SocketWriter writer(c.fd, options_.write_timeout, chunked, stopping_);
  std::string head = head_of(response, chunked, std::string::npos, keep, http10);
  bool ok = true;
  // An event stream's client wants the head at once. Any other streamed body (a generation's whole
  // JSON, written when it is done) sends its head with its first bytes: until then nothing of the
  // response has left, so a load balancer may still retry the request elsewhere if this process dies.
  if (response.content_type.starts_with("text/event-stream"))
    ok = writer.send_all(head);
  else
    writer.hold_head(std::move(head));
  while (ok && !writer.is_done()) {
    if (stopping_.load() || writer.client_gone()) {
      ok = false;
      break;
    }
    ok = response.stream(writer) && !writer.failed();
  }
  ok = ok && writer.is_done() && !writer.failed();
  if (response.on_stream_end) response.on_stream_end(ok);
  return ok;
}

}  // namespace okapi::server::http
