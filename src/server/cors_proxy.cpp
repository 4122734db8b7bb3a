// /cors-proxy?url=URL (GET and POST), llama-server's --ui-mcp-proxy: the server fetches URL for a
// browser page that may not (a remote MCP server without CORS headers) and answers with its
// status, headers and body (streamed). Only headers the client names explicitly reach the target:
// "x-llama-server-proxy-header-NAME: V" is sent as "NAME: V"; the client's own Authorization,
// cookies and API key never are. Plain http only (okapi has no TLS). Off unless the operator passes
// --ui-mcp-proxy (then 403, as llama-server): it lets whoever can call the API reach any address
// the server can, the server's own network included.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <memory>

#include "server/server_state.hpp"

namespace okapi::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kHeaderPrefix = "x-llama-server-proxy-header-";
constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kReadTimeout = std::chrono::seconds(600);  // as llama-server's proxy
constexpr size_t kMaxResponseHeaderBytes = 64 * 1024;
constexpr int kMaxRedirects = 5;

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string percent_decode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string query_param(std::string_view query, std::string_view key) {
  size_t begin = 0;
  while (begin <= query.size()) {
    size_t end = query.find('&', begin);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view pair = query.substr(begin, end - begin);
    const size_t eq = pair.find('=');
    if (percent_decode(pair.substr(0, eq)) == key) return eq == std::string_view::npos ? "" : percent_decode(pair.substr(eq + 1));
    begin = end + 1;
  }
  return "";
}

struct Url {
  std::string scheme, host, path;
  int port = 80;
};

Url parse_url(const std::string& text) {
  Url url;
  const size_t colon = text.find("://");
  if (colon == std::string::npos) throw ApiError(400, "invalid_request_error", "invalid target URL: " + text, "url");
  url.scheme = lower(text.substr(0, colon));
  if (url.scheme == "https")
    throw ApiError(501, "not_supported_error", "the CORS proxy reaches http:// targets only: okapi has no TLS", "url");
  if (url.scheme != "http")
    throw ApiError(400, "invalid_request_error", "unsupported URL scheme in target URL: " + url.scheme, "url");
  const size_t authority_begin = colon + 3;
  size_t authority_end = text.find_first_of("/?#", authority_begin);
  if (authority_end == std::string::npos) authority_end = text.size();
  std::string authority = text.substr(authority_begin, authority_end - authority_begin);
  if (const size_t at = authority.rfind('@'); at != std::string::npos) {
    if (authority.substr(0, at).find(':') != std::string::npos)
      throw ApiError(400, "invalid_request_error", "authentication in target URL is not supported", "url");
    authority.erase(0, at + 1);
  }
  std::string port;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) throw ApiError(400, "invalid_request_error", "invalid target URL: " + text, "url");
    url.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':') port = authority.substr(close + 2);
  } else {
    const size_t port_colon = authority.rfind(':');
    url.host = authority.substr(0, port_colon);
    if (port_colon != std::string::npos) port = authority.substr(port_colon + 1);
  }
  if (url.host.empty()) throw ApiError(400, "invalid_request_error", "invalid target URL: missing host", "url");
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
        std::stoi(port) > 65535)
      throw ApiError(400, "invalid_request_error", "invalid port in target URL: " + port, "url");
    url.port = std::stoi(port);
  }
  url.path = text.substr(authority_end);
  if (const size_t hash = url.path.find('#'); hash != std::string::npos) url.path.erase(hash);
  if (url.path.empty() || url.path[0] == '?') url.path = "/" + url.path;
  for (const char c : url.path)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
      throw ApiError(400, "invalid_request_error", "invalid character in target URL path", "url");
  return url;
}

bool header_token(std::string_view name) {
  if (name.empty()) return false;
  for (const char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos)
      return false;
  return true;
}

// One connection to the target; closed on destruction.
class Connection {
 public:
  explicit Connection(const Url& url, const std::function<bool()>& stop) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(url.host.c_str(), std::to_string(url.port).c_str(), &hints, &found); rc != 0)
      throw ApiError(502, "server_error", fmt::format("cannot resolve {}: {}", url.host, ::gai_strerror(rc)));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
    std::string failure = "no address";
    for (const addrinfo* a = found; a; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
        const auto deadline = Clock::now() + kConnectTimeout;
        int error = ETIMEDOUT;
        while (Clock::now() < deadline && !(stop && stop())) {
          pollfd pfd{fd, POLLOUT, 0};
          if (::poll(&pfd, 1, 100) > 0) {
            socklen_t len = sizeof(error);
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
            break;
          }
        }
        if (error == 0) {
          fd_ = fd;
          return;
        }
        failure = std::strerror(error);
      } else {
        failure = std::strerror(errno);
      }
      ::close(fd);
    }
    throw ApiError(502, "server_error", fmt::format("cannot connect to {}:{}: {}", url.host, url.port, failure));
  }
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool send_all(std::string_view data, const std::function<bool()>& stop) {
    const auto deadline = Clock::now() + kReadTimeout;
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if ((stop && stop()) || Clock::now() >= deadline) return false;
      pollfd pfd{fd_, POLLOUT, 0};
      ::poll(&pfd, 1, 100);
    }
    return true;
  }
  // Appends what arrives (waiting up to ~100 ms); false at end of stream or on error.
  bool receive(std::string& out) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) return true;
    char buffer[16384];
    const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    return false;
  }

 private:
  int fd_ = -1;
};

// The target's answer: status and headers read, the body read on demand.
struct Upstream {
  std::unique_ptr<Connection> connection;
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  std::string buffered;  // body bytes read with the headers
  enum class Framing { None, Length, Chunked, Close } framing = Framing::Close;
  uint64_t remaining = 0;  // Length: bytes still to come
  bool finished = false;
  std::string location;
  // Chunked decoding state.
  std::string raw;
  uint64_t chunk_left = 0;
  bool in_chunk = false;
  Clock::time_point last_data = Clock::now();

  // Decoded body bytes to `out` (possibly none yet); false once the body is complete or broken.
  bool next(std::string& out, const std::function<bool()>& stop) {
    if (finished) return false;
    if (stop && stop()) return false;
    if (framing == Framing::None) return finished = true, false;
    std::string data = std::move(buffered);
    buffered.clear();
    bool open = true;
    if (data.empty()) {
      open = connection->receive(data);
      if (!data.empty()) last_data = Clock::now();
      else if (Clock::now() - last_data > kReadTimeout) open = false;
    }
    switch (framing) {
      case Framing::Close:
        out += data;
        if (!open) finished = true;
        break;
      case Framing::Length: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining, data.size()));
        out.append(data, 0, take);
        remaining -= take;
        if (remaining == 0 || !open) finished = true;
        break;
      }
      case Framing::Chunked:
        raw += data;
        decode_chunks(out);
        if (!open) finished = true;
        break;
      case Framing::None: break;
    }
    return !finished;
  }

  void decode_chunks(std::string& out) {
    for (;;) {
      if (in_chunk) {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(chunk_left, raw.size()));
        out.append(raw, 0, take);
        raw.erase(0, take);
        chunk_left -= take;
        if (chunk_left > 0) return;
        if (raw.size() < 2) return;  // the CRLF after the chunk
        raw.erase(0, 2);
        in_chunk = false;
        continue;
      }
      const size_t eol = raw.find("\r\n");
      if (eol == std::string::npos) {
        if (raw.size() > 4096) finished = true;  // not chunked encoding
        return;
      }
      const std::string size_text = raw.substr(0, raw.find_first_of(";\r"));
      raw.erase(0, eol + 2);
      char* end = nullptr;
      chunk_left = std::strtoull(size_text.c_str(), &end, 16);
      if (size_text.empty() || end == size_text.c_str()) {
        finished = true;
        return;
      }
      if (chunk_left == 0) {  // trailers are not passed on
        finished = true;
        return;
      }
      in_chunk = true;
    }
  }
};

Upstream fetch(const std::string& method, const Url& url, const std::vector<std::pair<std::string, std::string>>& headers,
               const std::string& body, const std::function<bool()>& stop) {
  Upstream up;
  up.connection = std::make_unique<Connection>(url, stop);
  const bool default_port = url.port == 80;
  const std::string host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  std::string request = method + " " + url.path + " HTTP/1.1\r\n";
  request += "Host: " + host + (default_port ? "" : ":" + std::to_string(url.port)) + "\r\n";
  request += "Connection: close\r\n";
  for (const auto& [name, value] : headers) request += name + ": " + value + "\r\n";
  if (method != "GET" || !body.empty()) request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  request += "\r\n";
  request += body;
  if (!up.connection->send_all(request, stop)) throw ApiError(502, "server_error", "the target closed the connection");
  std::string head;
  const auto deadline = Clock::now() + kReadTimeout;
  size_t end;
  while ((end = head.find("\r\n\r\n")) == std::string::npos) {
    if (head.size() > kMaxResponseHeaderBytes) throw ApiError(502, "server_error", "the target's response headers are too large");
    if ((stop && stop()) || Clock::now() >= deadline) throw ApiError(504, "server_error", "the target did not answer in time");
    if (!up.connection->receive(head) && head.find("\r\n\r\n") == std::string::npos)
      throw ApiError(502, "server_error", "the target closed the connection without a response");
  }
  up.buffered = head.substr(end + 4);
  head.resize(end);
  // Status line: HTTP/1.x NNN reason
  const size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12)
    throw ApiError(502, "server_error", "the target's response is not HTTP/1.x");
  up.status = std::atoi(status_line.substr(9, 3).c_str());
  if (up.status < 100 || up.status > 599) throw ApiError(502, "server_error", "the target's response has no valid status");
  bool chunked = false;
  bool has_length = false;
  size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t eol = head.find("\r\n", pos);
    if (eol == std::string::npos) eol = head.size();
    const std::string line = head.substr(pos, eol - pos);
    pos = eol + 2;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(0, 1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.pop_back();
    const std::string key = lower(name);
    if (key == "transfer-encoding" && lower(value).find("chunked") != std::string::npos) chunked = true;
    if (key == "content-length") {
      char* tail = nullptr;
      up.remaining = std::strtoull(value.c_str(), &tail, 10);
      has_length = tail && *tail == '\0' && !value.empty();
    }
    if (key == "location") up.location = value;
    up.headers.emplace_back(std::move(name), std::move(value));
  }
  if (method == "HEAD" || up.status == 204 || up.status == 304 || up.status < 200) up.framing = Upstream::Framing::None;
  else if (chunked) up.framing = Upstream::Framing::Chunked;
  else if (has_length) up.framing = Upstream::Framing::Length;
  else up.framing = Upstream::Framing::Close;
  if (up.framing == Upstream::Framing::Length && up.remaining == 0) up.framing = Upstream::Framing::None;
  return up;
}

// Response headers that are the proxy's own business (framing, CORS, the server's name) or
// that must not land on okapi's origin (cookies).
bool strip_response_header(const std::string& key) {
  return key == "server" || key == "transfer-encoding" || key == "content-length" || key == "keep-alive" ||
         key == "connection" || key == "content-type" || key == "set-cookie" || key.rfind("access-control-", 0) == 0;
}

}  // namespace

void ServerState::handle_cors_proxy(const Request& req, Response& res) const {
  const std::string target = query_param(req.query, "url");
  if (target.empty()) throw ApiError(400, "invalid_request_error", "missing 'url' query parameter", "url");
  Url url = parse_url(target);
  // Only what the client asks for explicitly: never its own credentials.
  std::vector<std::pair<std::string, std::string>> headers;
  bool has_content_type = false;
  const std::string_view prefix(kHeaderPrefix);
  for (const auto& [key, value] : req.headers) {
    if (key.size() <= prefix.size() || key.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = key.substr(prefix.size());
    if (!header_token(name)) continue;
    if (name == "host" || name == "content-length" || name == "transfer-encoding" || name == "connection" ||
        name == "accept-encoding")  // the body is passed on as it comes: nothing compressed
      continue;
    if (name == "content-type") has_content_type = true;
    headers.emplace_back(name, value);
  }
  if (!has_content_type && req.method == "POST" && req.has_header("content-type"))
    headers.emplace_back("content-type", std::string(req.header("content-type")));
  const auto stop = [this] { return draining(); };
  std::string method = req.method;
  std::string body = req.body;
  Upstream up = fetch(method, url, headers, body, stop);
  for (int redirect = 0; redirect < kMaxRedirects && !up.location.empty() &&
                         (up.status == 301 || up.status == 302 || up.status == 303 || up.status == 307 || up.status == 308);
       ++redirect) {
    std::string next = up.location;
    if (next.rfind("http://", 0) != 0 && next.rfind("https://", 0) != 0) {
      if (next.empty() || next[0] != '/') break;
      next = "http://" + (url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host) + ":" +
             std::to_string(url.port) + next;
    }
    url = parse_url(next);
    if (up.status == 303 || ((up.status == 301 || up.status == 302) && method == "POST")) {
      method = "GET";
      body.clear();
    }
    up = fetch(method, url, headers, body, stop);
  }
  res.status = up.status;
  res.content_type.clear();
  for (const auto& [name, value] : up.headers) {
    const std::string key = lower(name);
    if (key == "content-type") res.content_type = value;
    if (!strip_response_header(key)) res.set_header(name, value);
  }
  if (up.framing == Upstream::Framing::None) return;
  auto upstream = std::make_shared<Upstream>(std::move(up));
  res.stream = [upstream, stop](http::StreamSink& sink) {
    std::string data;
    const bool more = upstream->next(data, stop);
    if (!data.empty() && !sink.write(data)) return false;
    if (!more) sink.done();
    return true;
  };
}

void ServerState::add_cors_proxy_routes() {
  if (options_.ui_mcp_proxy)
    std::fprintf(stderr, "okapi: warning: /cors-proxy is on (--ui-mcp-proxy): whoever can call this server can make it "
                         "fetch any http:// address it reaches, its own network included\n");
  const auto proxy = [this](const Request& req, Response& res) {
    if (!options_.ui_mcp_proxy) throw ApiError(403, "feature_disabled", "this feature is disabled");
    handle_cors_proxy(req, res);
  };
  add_route("GET", "/cors-proxy", proxy);
  add_route("POST", "/cors-proxy", proxy);
}

}  // namespace okapi::server
