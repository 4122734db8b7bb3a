// The hub's HTTP, on libcurl (internal to src/hub): small GETs for the API, resumable downloads for
// files. Redirects are followed (http and https only); libcurl drops the Authorization header
// when a redirect leaves the host, so a token never reaches a CDN.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "core/error.hpp"

namespace okapi::hub::detail {

// No HTTP answer at all (no route, refused, timed out): the cache may still serve.
class Unreachable : public Error {
 public:
  using Error::Error;
};

struct HttpAnswer {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // of the final response, names in lower case
};

// GET `url` with "Accept: application/json" (and the token): the answer, whatever its status. A
// body over `max_body` bytes is an okapi::Error, no answer at all an Unreachable.
HttpAnswer http_get(const std::string& url, const std::string& token, size_t max_body);

// What a download must come out as.
struct Expected {
  uint64_t size = 0;   // 0: unknown
  std::string sha256;  // empty: unknown (then a 64-hex X-Linked-Etag of the answer is checked)
};

// Downloads `url` into `destination`: bytes go to DESTINATION.part, a broken transfer resumes
// from there (Range: bytes=N-, a few tries), the whole is checked against `expected` and renamed
// into place. Returns the file's sha256. A wrong size or hash removes the .part and throws.
// `label` names the file in the progress report (on stderr when `report`).
std::string download(const std::string& url, const std::filesystem::path& destination, const Expected& expected,
                     const std::string& token, const std::string& label, bool report);

// The sha256 of a file, read in chunks.
std::string file_sha256(const std::filesystem::path& path);

// `text` with every byte outside [A-Za-z0-9._~-] (and '/' when `keep_slash`) as %XX.
std::string url_escape(const std::string& text, bool keep_slash);

}  // namespace okapi::hub::detail
