// An incremental HTTP/1.1 request parser (RFC 9112) for okapi serve's event loop: bytes go in as
// they arrive, in pieces of any size, and whole requests come out. It is strict where leniency
// lets one request be read two ways (request smuggling: Content-Length with Transfer-Encoding, two
// different lengths, a sign or spaces in a length, obsolete line folding) and refuses what is too
// big as soon as it can tell: a header block past its limit, a Content-Length past the body limit
// before any body byte is read. It never allocates more than the limits allow.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace okapi::server::http {

struct Request {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // percent-decoded, without the query
  std::string query;   // after '?', not decoded
  int minor_version = 1;  // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;
  bool keep_alive = true;

  // The first header of that (lower-case) name, or empty.
  std::string_view header(std::string_view lower_name) const;
  bool has_header(std::string_view lower_name) const;
};

struct ParseLimits {
  size_t max_header_bytes = 16 * 1024;  // request line and headers together
  size_t max_headers = 100;
  size_t max_body_bytes = size_t{8} << 20;
};

class RequestParser {
 public:
  enum class State {
    RequestLine,  // waiting for (more of) the request line and headers
    Body,         // headers read; the body is still coming
    Complete,     // a whole request is ready: take() it
    Error,        // the bytes are not a request okapi serves: answer error_status() and close
  };

  explicit RequestParser(ParseLimits limits = {}) : limits_(limits) {}

  // Consumes bytes up to the end of the current request and returns how many it took; the rest
  // (a pipelined next request) is for the next call, after take(). Takes nothing once Complete or
  // Error.
  size_t feed(std::string_view bytes);

  State state() const { return state_; }
  // Headers are read and the client waits for "100 Continue" before it sends the body.
  bool expects_continue() const { return state_ == State::Body && expect_continue_; }
  // Body bytes the headers announced (Content-Length), or 0 for a chunked body.
  size_t announced_body_bytes() const { return content_length_; }
  // Body bytes received so far.
  size_t buffered_body_bytes() const { return request_.body.size(); }
  // Anything of a request received (the first byte of a request line counts).
  bool started() const { return state_ != State::RequestLine || !line_.empty(); }

  int error_status() const { return error_status_; }  // 400, 413, 414, 431, 501 or 505
  const std::string& error_message() const { return error_message_; }

  // The complete request; the parser is then ready for the next one on the connection.
  Request take();

 private:
  void fail(int status, std::string message);
  // The bytes of `rest` that belong to the line being read: up to and including its '\n'.
  static size_t line_part(std::string_view rest);
  // Adds `part` (from line_part) to the line being read; true, with the whole line (its CRLF or LF
  // removed) in `line`, when `part` ends it.
  bool add_to_line(std::string_view part, std::string& line);
  // One line of the header block (without its line ending).
  void on_header_line(std::string_view line);
  void on_request_line(std::string_view line);
  void on_headers_done();
  size_t feed_body(std::string_view bytes);
  size_t feed_chunked(std::string_view bytes);
  void finish();

  ParseLimits limits_;
  State state_ = State::RequestLine;
  Request request_;
  std::string line_;           // the line being read (request line, header, chunk size or trailer)
  size_t header_bytes_ = 0;    // of the header block so far
  bool seen_request_line_ = false;
  size_t content_length_ = 0;
  bool has_content_length_ = false;
  bool chunked_ = false;
  bool expect_continue_ = false;
  // Chunked bodies: what is being read now.
  enum class ChunkPart { Size, Data, DataEnd, Trailer } chunk_part_ = ChunkPart::Size;
  size_t chunk_left_ = 0;
  int error_status_ = 0;
  std::string error_message_;
};

// "Bad Request", "Payload Too Large", ...; "Unknown" for a status okapi does not send.
const char* status_text(int status);

}  // namespace okapi::server::http
