#include "server/http_parser.hpp"

#include <algorithm>
#include <cctype>

namespace okapi::server::http {

namespace {

constexpr size_t kMaxChunkLine = 1024;  // a chunk-size line with its extensions

bool is_tchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Calls f(item) for each comma-separated, trimmed, non-empty item of a header list.
template <typename F>
void for_each_item(std::string_view list, F&& f) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view item = trim(list.substr(0, comma));
    if (!item.empty()) f(item);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::string_view Request::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return value;
  return {};
}

bool Request::has_header(std::string_view lower_name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return h.first == lower_name; });
}

size_t RequestParser::line_part(std::string_view rest) {
  const size_t newline = rest.find('\n');
  return newline == std::string_view::npos ? rest.size() : newline + 1;
}

bool RequestParser::add_to_line(std::string_view part, std::string& line) {
  if (part.empty() || part.back() != '\n') {
    line_.append(part);
    return false;
  }
  line_.append(part.substr(0, part.size() - 1));
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  line = std::move(line_);
  line_.clear();
  return true;
}

void RequestParser::fail(int status, std::string message) {
  if (state_ == State::Error) return;
  state_ = State::Error;
  error_status_ = status;
  error_message_ = std::move(message);
}

size_t RequestParser::feed(std::string_view bytes) {
  size_t used = 0;
  while (used < bytes.size() && (state_ == State::RequestLine || state_ == State::Body)) {
    if (state_ == State::Body) {
      used += chunked_ ? feed_chunked(bytes.substr(used)) : feed_body(bytes.substr(used));
      continue;
    }
    const std::string_view rest = bytes.substr(used);
    const size_t take = line_part(rest);
    if (header_bytes_ + take > limits_.max_header_bytes) {
      if (!seen_request_line_)
        fail(414, "the request line is too long");
      else
        fail(431, "the request headers are too large");
      return used + take;
    }
    header_bytes_ += take;
    used += take;
    std::string line;
    if (!add_to_line(rest.substr(0, take), line)) break;
    if (line.find('\r') != std::string::npos) {
      fail(400, "a bare CR in the request head");
    } else if (!seen_request_line_) {
      if (!line.empty()) on_request_line(line);  // empty lines before a request are allowed
    } else if (line.empty()) {
      on_headers_done();
    } else {
      on_header_line(line);
    }
  }
  return used;
}

void RequestParser::on_request_line(std::string_view line) {
  seen_request_line_ = true;
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "the request line is not METHOD TARGET HTTP/1.x");
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "the request method is not a token");
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7])))
    return fail(400, "the request line does not end in an HTTP version");
  if (version[5] != '1') return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
  request_.minor_version = version[7] - '0';
  request_.keep_alive = request_.minor_version >= 1;
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u >= 0x7f;
      }))
    return fail(400, "the request target has characters a URL cannot have");
  request_.method = std::string(method);
  request_.target = std::string(target);
  // absolute-form (proxies send it): keep the path; authority-form (CONNECT) is not served.
  if (target.size() > 7 && (iequals(target.substr(0, 7), "http://") || iequals(target.substr(0, 8), "https://"))) {
    const size_t scheme_end = target.find("//") + 2;
    const size_t slash = target.find('/', scheme_end);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  if (target == "*") {
    request_.path.push_back('*');  // (not `= "*"`: gcc 12 -O3 warns falsely of overlapping copies)
    return;
  }
  if (target.front() != '/') return fail(400, "the request target is not a path");
  const size_t question = target.find('?');
  const std::string_view path = target.substr(0, question);
  if (question != std::string_view::npos) request_.query = std::string(target.substr(question + 1));
  request_.path.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      request_.path += path[i];
      continue;
    }
    const int hi = i + 2 < path.size() ? hex_value(path[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_value(path[i + 2]) : -1;
    if (lo < 0) return fail(400, "the request path has a bad percent-escape");
    if (hi == 0 && lo == 0) return fail(400, "the request path has a NUL byte");
    request_.path += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
}

void RequestParser::on_header_line(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') return fail(400, "obsolete header line folding is not accepted");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return fail(400, "a header line has no ':'");
  const std::string_view name = line.substr(0, colon);
  if (!is_token(name)) return fail(400, "a header name is not a token (no space before ':')");
  const std::string_view value = trim(line.substr(colon + 1));
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return fail(400, "a header value has a control character");
  }
  if (request_.headers.size() >= limits_.max_headers) return fail(431, "the request has too many headers");
  request_.headers.emplace_back(lower(name), std::string(value));
}

void RequestParser::on_headers_done() {
  bool close = false, keep_alive = false;
  bool transfer_encoding = false;
  for (const auto& [name, value] : request_.headers) {
    if (name == "content-length") {
      bool bad = value.empty();
      for_each_item(value, [&](std::string_view item) {
        if (item.size() > 19 || !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          bad = true;
          return;
        }
        size_t n = 0;
        for (const char c : item) n = n * 10 + static_cast<size_t>(c - '0');
        if (has_content_length_ && n != content_length_) bad = true;
        has_content_length_ = true;
        content_length_ = n;
      });
      if (bad || !has_content_length_) {
        // All digits but too many of them is a size, only too big; anything else is malformed.
        const std::string_view v = trim(value);
        if (v.size() > 19 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return fail(413, "the request body is too large");
        return fail(400, "Content-Length is not a non-negative decimal number");
      }
    } else if (name == "transfer-encoding") {
      transfer_encoding = true;
      std::string_view last;
      int codings = 0;
      for_each_item(value, [&](std::string_view item) {
        last = item;
        ++codings;
      });
      if (codings != 1 || !iequals(last, "chunked")) return fail(501, "only the chunked transfer coding is accepted");
      chunked_ = true;
    } else if (name == "connection") {
      for_each_item(value, [&](std::string_view item) {
        if (iequals(item, "close")) close = true;
        if (iequals(item, "keep-alive")) keep_alive = true;
      });
    } else if (name == "expect") {
      if (iequals(trim(value), "100-continue")) expect_continue_ = true;
    }
  }
  if (transfer_encoding && has_content_length_)
    return fail(400, "a request cannot have both Content-Length and Transfer-Encoding");
  if (transfer_encoding && request_.minor_version == 0) return fail(400, "HTTP/1.0 has no chunked bodies");
  if (close)
    request_.keep_alive = false;
  else if (keep_alive)
    request_.keep_alive = true;
  if (content_length_ > limits_.max_body_bytes) return fail(413, "the request body is too large");
  if (chunked_) {
    state_ = State::Body;
    chunk_part_ = ChunkPart::Size;
  } else if (content_length_ > 0) {
    state_ = State::Body;
    // Reserved once: the size is checked above, so a slow body does not grow by doubling.
    request_.body.reserve(std::min<size_t>(content_length_, size_t{1} << 20));
  } else {
    finish();
  }
}

size_t RequestParser::feed_body(std::string_view bytes) {
  const size_t take = std::min(bytes.size(), content_length_ - request_.body.size());
  request_.body.append(bytes.substr(0, take));
  if (request_.body.size() == content_length_) finish();
  return take;
}

size_t RequestParser::feed_chunked(std::string_view bytes) {
  size_t used = 0;
  while (used < bytes.size() && state_ == State::Body) {
    const std::string_view rest = bytes.substr(used);
    if (chunk_part_ == ChunkPart::Data) {
      const size_t take = std::min(rest.size(), chunk_left_);
      request_.body.append(rest.substr(0, take));
      chunk_left_ -= take;
      used += take;
      if (chunk_left_ == 0) chunk_part_ = ChunkPart::DataEnd;
      continue;
    }
    // Size, DataEnd and Trailer parts are lines.
    const size_t take = line_part(rest);
    const size_t limit = chunk_part_ == ChunkPart::Trailer ? limits_.max_header_bytes : kMaxChunkLine;
    if (line_.size() + take > limit) {
      fail(chunk_part_ == ChunkPart::Trailer ? 431 : 400, "a chunk-size or trailer line is too long");
      return used + take;
    }
    if (chunk_part_ == ChunkPart::Trailer) {
      header_bytes_ += take;
      if (header_bytes_ > limits_.max_header_bytes) {
        fail(431, "the request trailers are too large");
        return used + take;
      }
    }
    used += take;
    std::string line;
    if (!add_to_line(rest.substr(0, take), line)) break;
    if (line.find('\r') != std::string::npos) {
      fail(400, "a bare CR in a chunked body");
      break;
    }
    if (chunk_part_ == ChunkPart::DataEnd) {
      if (!line.empty()) fail(400, "a chunk's data is longer than its size");
      chunk_part_ = ChunkPart::Size;
    } else if (chunk_part_ == ChunkPart::Trailer) {
      if (line.empty()) finish();  // trailer fields are read and dropped
    } else {
      size_t size = 0, digits = 0;
      while (digits < line.size() && hex_value(line[digits]) >= 0) {
        if (digits == 15) {
          fail(413, "the request body is too large");
          return used;
        }
        size = size * 16 + static_cast<size_t>(hex_value(line[digits]));
        ++digits;
      }
      const std::string_view after = trim(std::string_view(line).substr(digits));
      if (digits == 0 || (!after.empty() && after.front() != ';')) {
        fail(400, "a chunk-size line is not a hexadecimal size");
        break;
      }
      if (size > limits_.max_body_bytes - request_.body.size()) {
        fail(413, "the request body is too large");
        break;
      }
      if (size == 0) {
        chunk_part_ = ChunkPart::Trailer;
        header_bytes_ = 0;
      } else {
        chunk_part_ = ChunkPart::Data;
        chunk_left_ = size;
      }
    }
  }
  return used;
}

void RequestParser::finish() {
  state_ = State::Complete;
  expect_continue_ = false;
}

Request RequestParser::take() {
  Request out = std::move(request_);
  *this = RequestParser(limits_);
  return out;
}

const char* status_text(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

}  // namespace okapi::server::http
