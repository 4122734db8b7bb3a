#include "server/http_client.hpp"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace okapi::server::http {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

// A non-negative decimal (Content-Length) or hex (chunk size) number, at most 2^40.
bool parse_size(std::string_view text, int base, size_t& out) {
  if (text.empty() || text.size() > 12) return false;
  size_t value = 0;
  for (const char c : text) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return false;
    value = value * static_cast<size_t>(base) + static_cast<size_t>(digit);
  }
  if (value > (size_t{1} << 40)) return false;
  out = value;
  return true;
}

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000 * 60 * 60));
}

}  // namespace

std::string_view ResponseHead::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return value;
  return {};
}

void ResponseParser::fail(std::string message) {
  state_ = State::Error;
  error_ = std::move(message);
  buffer_.clear();
}

void ResponseParser::parse_head() {
  // buffer_ holds the head without its final blank line; lines end with \n (\r trimmed).
  std::string_view text = buffer_;
  const size_t line_end = text.find('\n');
  const std::string_view status_line = trim(text.substr(0, line_end));
  if (status_line.substr(0, 7) != "HTTP/1." || status_line.size() < 12 || status_line[8] != ' ') {
    fail(fmt::format("not an HTTP/1.x status line: '{}'", status_line.substr(0, 80)));
    return;
  }
  size_t status = 0;
  if (!parse_size(status_line.substr(9, 3), 10, status) || status < 100 || status > 599) {
    fail(fmt::format("bad status in '{}'", status_line.substr(0, 80)));
    return;
  }
  head_.status = static_cast<int>(status);
  text = line_end == std::string_view::npos ? std::string_view() : text.substr(line_end + 1);
  bool has_length = false;
  size_t length = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = trim(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      fail(fmt::format("malformed header line '{}'", line.substr(0, 80)));
      return;
    }
    std::string name = lower(line.substr(0, colon));
    std::string value(trim(line.substr(colon + 1)));
    if (name == "content-length") {
      size_t n = 0;
      if (!parse_size(value, 10, n) || (has_length && n != length)) {
        fail(fmt::format("bad Content-Length '{}'", value.substr(0, 40)));
        return;
      }
      has_length = true;
      length = n;
    } else if (name == "transfer-encoding" && lower(value).find("chunked") != std::string::npos) {
      chunked_ = true;
    }
    head_.headers.emplace_back(std::move(name), std::move(value));
  }
  buffer_.clear();
  const bool no_body = head_.status == 204 || head_.status == 304 || head_.status < 200;
  if (chunked_) {
    mode_ = BodyMode::Chunked;
    step_ = ChunkStep::Size;
    state_ = State::Body;
  } else if (has_length || no_body) {
    mode_ = BodyMode::Length;
    remaining_ = no_body ? 0 : length;
    state_ = remaining_ == 0 ? State::Complete : State::Body;
  } else {
    mode_ = BodyMode::UntilClose;
    state_ = State::Body;
  }
}

void ResponseParser::feed_chunked(std::string_view& bytes, std::string& body) {
  while (!bytes.empty() && state_ == State::Body) {
    if (step_ == ChunkStep::Data) {
      const size_t take = std::min(remaining_, bytes.size());
      body.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      remaining_ -= take;
      if (remaining_ == 0) step_ = ChunkStep::DataEnd;
      continue;
    }
    // A line: the chunk size, the CRLF after a chunk's data, or a trailer line.
    const size_t end = bytes.find('\n');
    const std::string_view part = bytes.substr(0, end == std::string_view::npos ? bytes.size() : end + 1);
    if (buffer_.size() + part.size() > 4096) {
      fail("a chunk-size or trailer line past 4096 bytes");
      return;
    }
    buffer_.append(part);
    bytes.remove_prefix(part.size());
    if (end == std::string_view::npos) return;  // the line continues in the next bytes
    const std::string line(trim(std::string_view(buffer_).substr(0, buffer_.size() - 1)));
    buffer_.clear();
    if (step_ == ChunkStep::DataEnd) {
      if (!line.empty()) {
        fail("no CRLF after a chunk's data");
        return;
      }
      step_ = ChunkStep::Size;
    } else if (step_ == ChunkStep::Size) {
      size_t size = 0;
      if (!parse_size(trim(std::string_view(line).substr(0, line.find(';'))), 16, size)) {
        fail(fmt::format("bad chunk size '{}'", line.substr(0, 40)));
        return;
      }
      if (size == 0) {
        step_ = ChunkStep::Trailer;
      } else {
        remaining_ = size;
        step_ = ChunkStep::Data;
      }
    } else if (line.empty()) {  // the blank line after the trailers ends the body
      state_ = State::Complete;
    }
  }
}

void ResponseParser::feed(std::string_view bytes, std::string& body) {
  while (!bytes.empty()) {
    if (state_ == State::Head) {
      // Look for the blank line that ends the head, in what is buffered and what came.
      const size_t before = buffer_.size();
      buffer_.append(bytes);
      size_t end = std::string::npos;
      size_t skip = 0;
      for (size_t i = before > 3 ? before - 3 : 0; i < buffer_.size(); ++i) {
        if (buffer_.compare(i, 4, "\r\n\r\n") == 0) {
          end = i;
          skip = 4;
          break;
        }
        if (buffer_.compare(i, 2, "\n\n") == 0) {
          end = i;
          skip = 2;
          break;
        }
      }
      if (end == std::string::npos) {
        if (buffer_.size() > max_head_bytes_) fail(fmt::format("a response head past {} bytes", max_head_bytes_));
        return;
      }
      if (end > max_head_bytes_) {
        fail(fmt::format("a response head past {} bytes", max_head_bytes_));
        return;
      }
      const std::string rest = buffer_.substr(end + skip);
      buffer_.resize(end);
      parse_head();
      if (state_ == State::Error) return;
      // What followed the head is body: fed again from a copy (buffer_ is reused for lines).
      if (!rest.empty()) {
        if (state_ == State::Complete) return;  // bytes past a complete response are ignored
        std::string_view tail = rest;
        if (mode_ == BodyMode::Chunked) {
          feed_chunked(tail, body);
        } else if (mode_ == BodyMode::Length) {
          const size_t take = std::min(remaining_, tail.size());
          body.append(tail.substr(0, take));
          remaining_ -= take;
          if (remaining_ == 0) state_ = State::Complete;
        } else {
          body.append(tail);
        }
      }
      return;
    }
    if (state_ != State::Body) return;
    if (mode_ == BodyMode::Chunked) {
      feed_chunked(bytes, body);
      return;
    }
    if (mode_ == BodyMode::Length) {
      const size_t take = std::min(remaining_, bytes.size());
      body.append(bytes.substr(0, take));
      remaining_ -= take;
      if (remaining_ == 0) state_ = State::Complete;
      return;
    }
    body.append(bytes);
    return;
  }
}

void ResponseParser::end_of_input() {
  if (state_ == State::Body && mode_ == BodyMode::UntilClose) {
    state_ = State::Complete;
  } else if (state_ == State::Head || state_ == State::Body) {
    fail(state_ == State::Head ? "the connection closed before a whole response head"
                               : "the connection closed inside the response body");
  }
}

ClientConnection::ClientConnection(const std::string& host, int port, std::chrono::milliseconds timeout) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    throw_error("cannot resolve {}:{}: {}", host, port, ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        rc = 0;
      } else {
        last_error = rc == 0 ? "timed out" : std::strerror(err != 0 ? err : errno);
        rc = -1;
      }
    } else if (rc < 0) {
      last_error = std::strerror(errno);
    }
    if (rc == 0) {
      fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (fd_ < 0) throw_error("cannot connect to {}:{}: {}", host, port, last_error);
}

ClientConnection::~ClientConnection() { close(); }

void ClientConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool ClientConnection::send_all(std::string_view data, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!data.empty() && fd_ >= 0) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      const int wait = remaining_ms(deadline);
      if (wait == 0 || ::poll(&p, 1, wait) <= 0 || (p.revents & (POLLERR | POLLHUP))) return false;
      continue;
    }
    return false;
  }
  return data.empty();
}

bool ClientConnection::read_some(std::string& out, std::chrono::milliseconds wait) {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  const int ready = ::poll(&p, 1, static_cast<int>(wait.count()));
  if (ready < 0 && errno != EINTR) {
    close();
    return false;
  }
  if (ready <= 0) return true;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buffer) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    close();  // 0: the end of the stream; < 0: an error
    return false;
  }
}

std::string request_head(std::string_view method, std::string_view target, const std::string& host, int port,
                         const std::vector<std::pair<std::string, std::string>>& headers, size_t body_bytes) {
  std::string head = fmt::format("{} {} HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\n", method, target, host, port);
  for (const auto& [name, value] : headers) head += fmt::format("{}: {}\r\n", name, value);
  if (body_bytes > 0 || method == "POST" || method == "PUT" || method == "PATCH")
    head += fmt::format("Content-Length: {}\r\n", body_bytes);
  head += "\r\n";
  return head;
}

ClientResponse fetch(const std::string& host, int port, std::string_view method, std::string_view target,
                     const std::vector<std::pair<std::string, std::string>>& headers, std::string_view body,
                     std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  ClientConnection connection(host, port, timeout);
  std::string request = request_head(method, target, host, port, headers, body.size());
  request.append(body);
  if (!connection.send_all(request, timeout)) throw_error("{}:{}: the server did not take the request", host, port);
  ResponseParser parser;
  ClientResponse response;
  std::string bytes;
  while (parser.state() == ResponseParser::State::Head || parser.state() == ResponseParser::State::Body) {
    const int wait = remaining_ms(deadline);
    if (wait == 0) throw_error("{}:{}: no whole response within {} ms", host, port, timeout.count());
    bytes.clear();
    const bool open = connection.read_some(bytes, std::chrono::milliseconds(std::min(wait, 100)));
    parser.feed(bytes, response.body);
    if (!open) parser.end_of_input();
  }
  if (parser.state() == ResponseParser::State::Error)
    throw_error("{}:{}: malformed response: {}", host, port, parser.error());
  response.head = parser.head();
  return response;
}

}  // namespace okapi::server::http
