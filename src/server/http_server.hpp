// okapi serve's HTTP/1.1 server: one event-loop thread (epoll) reads every connection and parses
// requests (http_parser.hpp); only complete requests reach a worker thread. A client that trickles
// its headers or body therefore costs a few kilobytes and no thread: it is cut off by a header
// deadline (from its first byte, not per byte) or a body deadline, and when the connection cap is
// reached the oldest connection that has not sent a whole request makes room for the new one.
// Requests that must answer even when every worker is busy (/health) are answered on the loop.
//
// Why our own loop rather than cpp-httplib (a thread per connection: 100 slow clients took /health
// down) or Boost.Beast: the loop, the parser and the deadlines are ~800 lines that the fuzz target
// drives byte by byte, with no dependency that would need its own thread model bridged to ours.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "server/http_parser.hpp"

namespace okapi::server::http {

// Where a streamed response goes, chunk by chunk.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // False when the client has gone or did not read for the write timeout: stop producing.
  virtual bool write(std::string_view data) = 0;
  // The response is complete.
  virtual void done() = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // A streamed response (chunked transfer coding) instead of `body`: called again and again (it may
  // block a while waiting for data) until it calls sink.done() or returns false (abandon). Between
  // calls the server checks that the client is still connected.
  std::function<bool(StreamSink&)> stream;
  // A response that a queued job fills in later (embeddings): called again and again (each call
  // may block a while, ~100 ms) until it returns true, having set status, body and headers (or
  // `stream`). Between calls the server checks that the client is still connected; when it is not,
  // on_stream_end(false) is called and the connection closed. Headers are sent only after, so the
  // status can still be an error.
  std::function<bool(Response&)> await;
  // Called once a streamed (or awaited) response ends: true when it was sent whole.
  std::function<void(bool completed)> on_stream_end;
  bool close_connection = false;

  void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
  void set_content(std::string text, std::string type) {
    body = std::move(text);
    content_type = std::move(type);
  }
};

struct ServerOptions {
  std::string host = "127.0.0.1";  // comma-separated: a socket on each ("127.0.0.1,::1"), one port
  int port = 8080;  // 0: any free port
  int worker_threads = 8;
  // Open connections at most (0: 4096, or less when the process's file limit is lower). When
  // reached, the oldest connection that has not sent a whole request is closed for a new one.
  size_t max_connections = 0;
  ParseLimits limits;
  std::chrono::milliseconds header_timeout{10000};  // from a request's first byte to its last header
  std::chrono::milliseconds body_timeout{30000};    // from the last header to the last body byte
  std::chrono::milliseconds idle_timeout{5000};     // a kept-alive connection waiting for a request
  std::chrono::milliseconds write_timeout{30000};   // a response the client does not read
  // Request bodies being received, all connections together; a request that would pass this gets
  // 503 at once, so that many slow uploads cannot take the memory.
  size_t max_buffered_body_bytes = size_t{256} << 20;
};

// The application: dispatch(request, response) on a worker thread; answer_on_loop(request,
// response) first, on the loop thread, for requests that must never wait for a worker (it returns
// true when it answered; it must not block). error_response(status, message) shapes the errors the
// HTTP layer sends itself (malformed requests, timeouts, too many connections).
struct Application {
  std::function<void(const Request&, Response&)> dispatch;
  std::function<bool(const Request&, Response&)> answer_on_loop;
  std::function<Response(int status, const std::string& message)> error_response;
};

class Server {
 public:
  Server(ServerOptions options, Application app);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens; returns the port. Throws okapi::Error naming the address when it cannot
  // (a port in use included: no SO_REUSEPORT, so two servers never share a port).
  int bind();
  // Serves until stop(); call from one thread after bind().
  void run();
  // Thread-safe: stop accepting and reading, let responses being written finish (streams are cut
  // short), close every connection; run() returns once the workers are done.
  void stop();
  bool stopping() const { return stopping_.load(); }

  // Connections open now (tests, metrics).
  size_t open_connections() const { return open_connections_.load(); }

 private:
  struct Connection;
  using Clock = std::chrono::steady_clock;

  void accept_all(int listen_fd);
  void on_readable(Connection& c);
  void process_input(Connection& c);  // parse what is buffered; may dispatch or close c
  // Each returns true when `c` is still on the loop, ready for its next request.
  bool dispatch(Connection& c);
  bool answer_from_loop(Connection& c, Response&& response, bool keep_alive, bool head_only = false);
  void fail_connection(Connection& c, int status, const std::string& message);
  void start_lingering_close(Connection& c);
  void close_connection(int fd);
  void check_deadlines(Clock::time_point now);
  void take_returned();
  bool evict_one();
  void worker_loop();
  void handle(std::unique_ptr<Connection> c, Request request);
  // Writes the whole response on a worker; false when the connection must be closed.
  bool write_response(Connection& c, const Request& request, Response& response);
  void give_back(std::unique_ptr<Connection> c);

  ServerOptions options_;
  Application app_;
  std::vector<int> listen_fds_;  // one per address of options_.host
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> open_connections_{0};
  size_t max_connections_ = 0;

  // Loop thread only.
  std::vector<std::unique_ptr<Connection>> by_fd_;  // indexed by fd; null when not on the loop
  size_t loop_connections_ = 0;
  size_t buffered_body_bytes_ = 0;

  // Handed between the loop and the workers.
  std::mutex mutex_;
  std::deque<std::pair<std::unique_ptr<Connection>, Request>> tasks_;
  std::vector<std::unique_ptr<Connection>> returned_;
  std::condition_variable_any work_ready_;
  std::vector<std::thread> workers_;
  size_t busy_connections_ = 0;  // under mutex_: owned by workers
};

}  // namespace okapi::server::http
