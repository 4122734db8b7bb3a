// A small HTTP/1.1 client for okapi serve's router (router.hpp): it talks to the model servers it
// started on the loopback interface. One request per connection ("Connection: close"), so a
// response ends with its Content-Length, its last chunk or the connection's end. Reading is
// incremental (ResponseParser), so a streamed response (server-sent events) is passed on as it
// arrives, and every wait is bounded so the caller can notice its own client leaving.
#pragma once
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace okapi::server::http {

struct ResponseHead {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string_view header(std::string_view lower_name) const;
};

// Reads a response from bytes fed in pieces of any size: the head, then the body decoded
// (chunked coding removed). Malformed input or a head past the limit is an error, never a crash.
class ResponseParser {
 public:
  enum class State { Head, Body, Complete, Error };
  explicit ResponseParser(size_t max_head_bytes = 64 * 1024) : max_head_bytes_(max_head_bytes) {}

  // Consumes `bytes`; decoded body bytes are appended to `body`.
  void feed(std::string_view bytes, std::string& body);
  // The connection ended: a body delimited by the close is complete; anything else cut short is an error.
  void end_of_input();

  State state() const { return state_; }
  bool head_ready() const { return state_ == State::Body || state_ == State::Complete; }
  const ResponseHead& head() const { return head_; }
  const std::string& error() const { return error_; }
  // The body is sent chunked (it is streamed, its length unknown).
  bool chunked() const { return chunked_; }

 private:
  enum class BodyMode { Length, Chunked, UntilClose };
  enum class ChunkStep { Size, Data, DataEnd, Trailer };
  void fail(std::string message);
  void parse_head();
  void feed_chunked(std::string_view& bytes, std::string& body);

  size_t max_head_bytes_;
  State state_ = State::Head;
  std::string buffer_;  // the head, or a chunk-size / trailer line being read
  ResponseHead head_;
  std::string error_;
  BodyMode mode_ = BodyMode::UntilClose;
  bool chunked_ = false;
  size_t remaining_ = 0;  // body (Length) or chunk (Data) bytes still expected
  ChunkStep step_ = ChunkStep::Size;
};

// A blocking TCP connection with bounded waits.
class ClientConnection {
 public:
  // Connects to host:port (numeric IPv4/IPv6 or a name); throws okapi::Error with the address.
  ClientConnection(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~ClientConnection();
  ClientConnection(const ClientConnection&) = delete;
  ClientConnection& operator=(const ClientConnection&) = delete;

  // Sends everything; false when the peer is gone or does not read within `timeout`.
  bool send_all(std::string_view data, std::chrono::milliseconds timeout);
  // Waits up to `wait` for bytes and appends what arrives to `out`. Returns false at the end of
  // the stream or on an error (then closed() is true); true otherwise, with or without bytes.
  bool read_some(std::string& out, std::chrono::milliseconds wait);
  bool closed() const { return fd_ < 0; }
  void close();

 private:
  int fd_ = -1;
};

// The request line and headers of a request to `host:port` ("Connection: close", Content-Length
// when there is a body). `headers` are sent as given (hop-by-hop ones are the caller's business).
std::string request_head(std::string_view method, std::string_view target, const std::string& host, int port,
                         const std::vector<std::pair<std::string, std::string>>& headers, size_t body_bytes);

struct ClientResponse {
  ResponseHead head;
  std::string body;
};
// One whole request, waiting at most `timeout` in all; throws okapi::Error when the server cannot be
// reached, sends a malformed response, or runs past the timeout.
ClientResponse fetch(const std::string& host, int port, std::string_view method, std::string_view target,
                     const std::vector<std::pair<std::string, std::string>>& headers, std::string_view body,
                     std::chrono::milliseconds timeout);

}  // namespace okapi::server::http
