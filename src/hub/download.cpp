// libcurl behind the hub: API GETs and resumable, checked downloads (src/hub/http.hpp).
#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "hub/http.hpp"

namespace okapi::hub::detail {
namespace {

namespace fs = std::filesystem;

void init_curl_once() {
  static const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (code != CURLE_OK) throw_error("libcurl failed to start: {}", curl_easy_strerror(code));
}

struct EasyDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct ListDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using Easy = std::unique_ptr<CURL, EasyDeleter>;
using HeaderList = std::unique_ptr<curl_slist, ListDeleter>;

// The headers of the last response seen (a redirect's are replaced by the next response's).
struct HeaderState {
  long status = 0;
  std::map<std::string, std::string> headers;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* state = static_cast<HeaderState*>(user);
  const size_t n = size * count;
  std::string line(data, n);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {  // a new response: forget the previous one's headers
    state->headers.clear();
    const size_t space = line.find(' ');
    state->status = space == std::string::npos ? 0 : std::strtol(line.c_str() + space + 1, nullptr, 10);
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return n;
  std::string name = line.substr(0, colon);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  size_t start = colon + 1;
  while (start < line.size() && (line[start] == ' ' || line[start] == '\t')) ++start;
  state->headers[name] = line.substr(start);
  return n;
}

// A handle set up as every hub request is: redirects (http/https only), timeouts for a stalled
// peer, the token, a user agent.
Easy make_easy(const std::string& url, const std::string& token, HeaderList& headers, char* error_buffer,
               HeaderState& header_state) {
  init_curl_once();
  if (token.find_first_of("\r\n") != std::string::npos) throw_error("the Hugging Face token holds a line break");
  Easy curl(curl_easy_init());
  if (!curl) throw_error("libcurl could not make a handle");
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);  // under 1 byte/s for a minute: a stalled peer
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "okapi/0.1");
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &header_state);
  if (!token.empty()) headers.reset(curl_slist_append(headers.release(), ("Authorization: Bearer " + token).c_str()));
  return curl;
}

std::string curl_failure(CURLcode code, const char* error_buffer) {
  return error_buffer[0] != '\0' ? std::string(error_buffer) : std::string(curl_easy_strerror(code));
}

bool is_hex64(const std::string& text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isxdigit(c); });
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string human_size(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} {}", bytes, units[unit]) : fmt::format("{:.1f} {}", bytes, units[unit]);
}

// Progress on stderr: a redrawn bar on a terminal, otherwise only the plain lines the caller prints.
class Progress {
 public:
  Progress(std::string label, bool report) : label_(std::move(label)), tty_(report && isatty(2) == 1) {}
  void update(uint64_t done, uint64_t total) {
    if (!tty_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(100) && done != total) return;
    last_ = now;
    drawn_ = true;
    if (total == 0) {
      std::fprintf(stderr, "\r%s %s\033[K", label_.c_str(), human_size(static_cast<double>(done)).c_str());
    } else {
      const int width = 30;
      const double fraction = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
      const int filled = static_cast<int>(fraction * width);
      std::fprintf(stderr, "\r%s [%s%s] %3d%% %s / %s\033[K", label_.c_str(), std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(width - filled), '.').c_str(), static_cast<int>(fraction * 100),
                   human_size(static_cast<double>(done)).c_str(), human_size(static_cast<double>(total)).c_str());
    }
    std::fflush(stderr);
  }
  void end_line() {
    if (tty_ && drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  std::string label_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

// One transfer into the .part file, appended from `offset`.
struct Transfer {
  std::FILE* file = nullptr;
  uint64_t offset = 0;        // bytes in the .part before this transfer
  uint64_t written = 0;       // bytes this transfer wrote
  uint64_t limit = 0;         // the expected size (0: none): more is refused
  bool checked = false;       // the response's status was looked at
  bool restarted = false;     // the server ignored the Range and sent the whole file
  std::string refusal;        // why the write callback stopped the transfer
  HeaderState* header_state = nullptr;
  Progress* progress = nullptr;
};

size_t on_file_data(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (!t->checked) {
    t->checked = true;
    const long status = t->header_state->status;
    if (status == 200 && t->offset > 0) {
      // The server ignored the Range: start the file over.
      if (std::fflush(t->file) != 0 || ftruncate(fileno(t->file), 0) != 0 || std::fseek(t->file, 0, SEEK_SET) != 0) {
        t->refusal = "could not truncate the partial file";
        return 0;
      }
      t->offset = 0;
      t->restarted = true;
    } else if (status == 206) {
      const std::string range = t->header_state->headers["content-range"];  // "bytes START-END/TOTAL"
      const std::string expected = fmt::format("bytes {}-", t->offset);
      if (range.rfind(expected, 0) != 0) {
        t->refusal = fmt::format("the server resumed at '{}' instead of byte {}", range, t->offset);
        return 0;
      }
    } else if (status != 200) {
      t->refusal = fmt::format("HTTP {}", status);
      return 0;
    }
  }
  if (t->limit != 0 && t->offset + t->written + n > t->limit) {
    t->refusal = fmt::format("the server sent more than the {} bytes the hub lists", t->limit);
    return 0;
  }
  if (std::fwrite(data, 1, n, t->file) != n) {
    t->refusal = "a write to the partial file failed (disk full?)";
    return 0;
  }
  t->written += n;
  if (t->progress != nullptr) t->progress->update(t->offset + t->written, t->limit);
  return n;
}

std::string http_advice(long status) {
  if (status == 401 || status == 403)
    return "; the file is gated or private: pass --hf-token or set HF_TOKEN (and accept its terms on the hub)";
  if (status == 404) return "; the file is not there";
  return "";
}

}  // namespace

std::string url_escape(const std::string& text, bool keep_slash) {
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string file_sha256(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("cannot read {}", path.string());
  Sha256 hash;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = in.gcount();
    if (got > 0) hash.update(buffer.data(), static_cast<size_t>(got));
  }
  if (in.bad()) throw_error("reading {} failed", path.string());
  return hash.hex_digest();
}

HttpAnswer http_get(const std::string& url, const std::string& token, size_t max_body) {
  HeaderList headers;
  char error_buffer[CURL_ERROR_SIZE] = {};
  HeaderState header_state;
  Easy curl = make_easy(url, token, headers, error_buffer, header_state);
  headers.reset(curl_slist_append(headers.release(), "Accept: application/json"));
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT, 120L);
  struct Sink {
    std::string body;
    size_t max_body;
    bool too_big = false;
  } sink{{}, max_body};
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t count, void* user) -> size_t {
    auto* s = static_cast<Sink*>(user);
    const size_t n = size * count;
    if (s->body.size() + n > s->max_body) {
      s->too_big = true;
      return 0;
    }
    s->body.append(data, n);
    return n;
  });
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &sink);
  const CURLcode code = curl_easy_perform(curl.get());
  if (sink.too_big) throw_error("GET {}: the answer is over {} bytes", url, max_body);
  if (code != CURLE_OK) throw Unreachable(fmt::format("GET {} failed: {}", url, curl_failure(code, error_buffer)));
  HttpAnswer answer;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &answer.status);
  answer.body = std::move(sink.body);
  answer.headers = std::move(header_state.headers);
  return answer;
}

std::string download(const std::string& url, const fs::path& destination, const Expected& expected,
                     const std::string& token, const std::string& label, bool report) {
  constexpr int kAttempts = 5;
  const fs::path part = destination.string() + ".part";
  std::error_code ec;
  fs::create_directories(destination.parent_path(), ec);
  if (ec) throw_error("cannot create {}: {}", destination.parent_path().string(), ec.message());

  Progress progress(label, report);
  const auto started = std::chrono::steady_clock::now();
  std::string linked_sha256;  // X-Linked-Etag of the last answer, when it is a sha256
  std::string last_failure;
  bool complete = false;
  for (int attempt = 0; attempt < kAttempts && !complete; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(250 << (attempt - 1)));
    uint64_t offset = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
    if (ec) offset = 0;
    if (expected.size != 0 && offset > expected.size) {  // not a prefix of this file: start over
      fs::remove(part, ec);
      offset = 0;
    }
    if (report) {
      if (offset > 0) {
        std::fprintf(stderr, "okapi: resuming %s at %s%s\n", label.c_str(), human_size(static_cast<double>(offset)).c_str(),
                     last_failure.empty() ? "" : fmt::format(" (after: {})", last_failure).c_str());
      } else if (attempt == 0) {
        std::fprintf(stderr, "okapi: downloading %s%s\n", label.c_str(),
                     expected.size ? fmt::format(" ({})", human_size(static_cast<double>(expected.size))).c_str() : "");
      } else {
        std::fprintf(stderr, "okapi: retrying %s (after: %s)\n", label.c_str(), last_failure.c_str());
      }
    }
    if (expected.size != 0 && offset == expected.size) {  // a previous run got every byte
      complete = true;
      break;
    }
    std::FILE* file = std::fopen(part.c_str(), offset > 0 ? "ab" : "wb");
    if (file == nullptr) throw_error("cannot write {}", part.string());
    HeaderList headers;
    char error_buffer[CURL_ERROR_SIZE] = {};
    HeaderState header_state;
    Transfer transfer{file, offset, 0, expected.size, false, false, {}, &header_state, &progress};
    CURLcode code;
    {
      Easy curl = make_easy(url, token, headers, error_buffer, header_state);
      curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers.get());
      if (offset > 0) curl_easy_setopt(curl.get(), CURLOPT_RANGE, fmt::format("{}-", offset).c_str());
      curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, on_file_data);
      curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &transfer);
      code = curl_easy_perform(curl.get());
    }
    const bool closed = std::fclose(file) == 0;
    progress.end_line();
    const long status = header_state.status;
    const auto linked = header_state.headers.find("x-linked-etag");
    if (linked != header_state.headers.end()) {
      std::string tag = linked->second;
      tag.erase(std::remove(tag.begin(), tag.end(), '"'), tag.end());
      if (is_hex64(tag)) linked_sha256 = lower(tag);
    }
    if (status == 401 || status == 403 || status == 404)
      throw_error("GET {}: HTTP {}{}", url, status, http_advice(status));
    if (status == 416) {  // the .part is not a prefix the server can continue: start over
      fs::remove(part, ec);
      last_failure = "HTTP 416";
      continue;
    }
    if (!closed) {
      last_failure = "closing the partial file failed";
      continue;
    }
    if (code == CURLE_OK && !transfer.refusal.empty()) code = CURLE_WRITE_ERROR;
    if (code == CURLE_OK && status != 200 && status != 206) {  // an empty error answer (500, 503)
      last_failure = fmt::format("HTTP {}", status);
      continue;
    }
    if (code != CURLE_OK) {
      last_failure = !transfer.refusal.empty() ? transfer.refusal : curl_failure(code, error_buffer);
      if (status >= 400 && status < 500 && status != 408 && status != 429)
        throw_error("GET {}: HTTP {}", url, status);
      if (transfer.refusal.find("more than") != std::string::npos) fs::remove(part, ec);
      continue;
    }
    complete = true;
  }
  if (!complete) throw_error("downloading {} failed after {} tries: {}", url, kAttempts, last_failure);

  const uint64_t size = fs::file_size(part, ec);
  if (expected.size != 0 && size != expected.size) {
    fs::remove(part, ec);
    throw_error("{}: got {} bytes, the hub lists {}; the file was not kept", label, size, expected.size);
  }
  const std::string want = !expected.sha256.empty() ? lower(expected.sha256) : linked_sha256;
  const std::string got = file_sha256(part);
  if (!want.empty() && got != want) {
    fs::remove(part, ec);
    throw_error("{}: sha256 {} does not match the hub's {}; the file was not kept", label, got, want);
  }
  fs::rename(part, destination, ec);
  if (ec) throw_error("cannot rename {} to {}: {}", part.string(), destination.string(), ec.message());
  if (report) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::fprintf(stderr, "okapi: downloaded %s: %s in %.1f s%s\n", label.c_str(), human_size(static_cast<double>(size)).c_str(),
                 seconds, want.empty() ? "" : ", sha256 checked");
  }
  return got;
}

}  // namespace okapi::hub::detail
