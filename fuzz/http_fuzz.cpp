// libFuzzer target for okapi serve's HTTP layer (src/server/http_parser, http_server), two ways:
//
// - parser: the input's bytes go to a RequestParser whole, and again in pieces whose sizes come
//   from the input itself (a client's slow and partial writes). Both readings must agree request
//   for request (method, path, headers, body, keep-alive) and end in the same error, the parser
//   must never take more bytes than it is given, nor report a request past its limits.
// - server: the same bytes are written, in those pieces, to a live http::Server over a loopback
//   socket; the server must answer with well-formed HTTP responses (or close), never crash, and
//   keep answering /health afterwards.
//
// Byte 0 picks the way (bit 0) and the piece sizes' seed; the rest is the stream.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "server/http_parser.hpp"
#include "server/http_server.hpp"

namespace {

using okapi::server::http::ParseLimits;
using okapi::server::http::Request;
using okapi::server::http::RequestParser;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "http_fuzz finding: %s\n", what);
  std::abort();
}

ParseLimits small_limits() {
  ParseLimits limits;
  limits.max_header_bytes = 2048;
  limits.max_headers = 16;
  limits.max_body_bytes = 4096;
  return limits;
}

struct Reading {
  std::vector<Request> requests;
  int error = 0;
};

// Piece sizes from a tiny generator seeded by the input (1..17 bytes, some of them 1).
Reading read_in_pieces(std::string_view stream, uint8_t seed) {
  RequestParser parser(small_limits());
  Reading out;
  std::string pending;
  size_t offset = 0;
  uint32_t state = seed | 1u;
  while (true) {
    if (offset < stream.size()) {
      state = state * 1103515245u + 12345u;
      const size_t piece = seed == 0 ? stream.size() : 1 + (state >> 16) % 17;
      const size_t n = std::min(piece, stream.size() - offset);
      pending.append(stream.substr(offset, n));
      offset += n;
    }
    const size_t used = parser.feed(pending);
    if (used > pending.size()) finding("the parser took more bytes than it was given");
    pending.erase(0, used);
    if (parser.state() == RequestParser::State::Error) {
      out.error = parser.error_status();
      if (out.error < 400 || out.error > 505) finding("an error status outside 4xx/5xx");
      return out;
    }
    if (parser.state() == RequestParser::State::Complete) {
      Request r = parser.take();
      if (r.body.size() > small_limits().max_body_bytes) finding("a body past the limit");
      if (r.headers.size() > small_limits().max_headers) finding("more headers than the limit");
      out.requests.push_back(std::move(r));
      continue;
    }
    if (offset >= stream.size() && used == 0) return out;
  }
}

void fuzz_parser(std::string_view stream, uint8_t seed) {
  const Reading whole = read_in_pieces(stream, 0);
  const Reading split = read_in_pieces(stream, static_cast<uint8_t>(seed | 1));
  if (whole.error != split.error) finding("split input ends in a different error");
  if (whole.requests.size() != split.requests.size()) finding("split input gives a different number of requests");
  for (size_t i = 0; i < whole.requests.size(); ++i) {
    const Request& a = whole.requests[i];
    const Request& b = split.requests[i];
    if (a.method != b.method || a.target != b.target || a.path != b.path || a.query != b.query || a.body != b.body ||
        a.headers != b.headers || a.keep_alive != b.keep_alive || a.minor_version != b.minor_version)
      finding("split input gives a different request");
  }
}

// One server for the whole run: answers every request with its path and body size.
class LiveServer {
 public:
  LiveServer() {
    okapi::server::http::ServerOptions options;
    options.port = 0;
    options.worker_threads = 2;
    options.limits = small_limits();
    options.header_timeout = std::chrono::milliseconds(500);
    options.body_timeout = std::chrono::milliseconds(500);
    options.idle_timeout = std::chrono::milliseconds(500);
    okapi::server::http::Application app;
    app.dispatch = [](const Request& req, okapi::server::http::Response& res) {
      if (req.path == "/stream") {
        auto left = std::make_shared<int>(3);
        res.stream = [left](okapi::server::http::StreamSink& sink) {
          if ((*left)-- > 0) return sink.write("data: x\n\n");
          sink.done();
          return true;
        };
        return;
      }
      res.set_content(req.path + " " + std::to_string(req.body.size()), "text/plain");
    };
    app.answer_on_loop = [](const Request& req, okapi::server::http::Response& res) {
      if (req.path != "/health") return false;
      res.set_content("ok", "text/plain");
      return true;
    };
    app.error_response = [](int status, const std::string& message) {
      okapi::server::http::Response res;
      res.status = status;
      res.set_content(message, "text/plain");
      return res;
    };
    server_ = std::make_unique<okapi::server::http::Server>(options, std::move(app));
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~LiveServer() {
    server_->stop();
    thread_.join();
  }
  int port() const { return port_; }
  size_t open_connections() const { return server_->open_connections(); }

 private:
  std::unique_ptr<okapi::server::http::Server> server_;
  int port_ = 0;
  std::thread thread_;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Closed with a reset, not a FIN: thousands of connections a second would otherwise leave the
  // client's ports in TIME_WAIT and run out of them within a minute (connect then fails).
  const linger abort_on_close{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
  // libFuzzer's timers interrupt system calls (EINTR): a connect goes on in the background then.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int error = errno;
    if (error == EINTR) {
      pollfd p{fd, POLLOUT, 0};
      while (::poll(&p, 1, 5000) < 0 && errno == EINTR) {
      }
      socklen_t size = sizeof(error);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
    }
    if (error != 0) {
      std::fprintf(stderr, "http_fuzz: connect: %s\n", std::strerror(error));
      finding("the server stopped accepting");
    }
  }
  return fd;
}

// Reads until the server closes, or nothing comes for timeout_ms (EINTR is retried).
std::string drain(int fd, int timeout_ms) {
  std::string out;
  char buffer[8192];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

void fuzz_server(std::string_view stream, uint8_t seed) {
  static LiveServer server;
  const int fd = connect_to(server.port());
  uint32_t state = seed | 1u;
  size_t offset = 0;
  while (offset < stream.size()) {
    state = state * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(1 + (state >> 16) % 64, stream.size() - offset);
    const ssize_t sent = ::send(fd, stream.data() + offset, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) break;
    offset += static_cast<size_t>(sent);
  }
  ::shutdown(fd, SHUT_WR);
  const std::string answer = drain(fd, 2000);
  ::close(fd);
  // Every response the server wrote starts as a status line.
  if (!answer.empty() && answer.rfind("HTTP/1.", 0) != 0) finding("the server wrote something that is not a response");
  // And it still answers (a second try tells a machine that stalled for 5 s from a server that
  // stopped answering).
  for (int attempt = 0;; ++attempt) {
    const int probe = connect_to(server.port());
    static constexpr std::string_view kHealth = "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n";
    while (::send(probe, kHealth.data(), kHealth.size(), MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
    const std::string health = drain(probe, 5000);
    ::close(probe);
    if (health.rfind("HTTP/1.1 200", 0) == 0) return;
    std::fprintf(stderr, "http_fuzz: /health try %d got %zu bytes: '%.80s'; %zu connections open\n", attempt + 1,
                 health.size(), health.c_str(), server.open_connections());
    if (attempt == 1) finding("/health did not answer after the input");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1)
    fuzz_server(stream, data[0]);
  else
    fuzz_parser(stream, data[0]);
  return 0;
}
