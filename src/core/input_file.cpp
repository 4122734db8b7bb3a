#include "core/input_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.hpp"

namespace okapi {

void require_input_file(const std::filesystem::path& path, std::string_view what) {
  namespace fs = std::filesystem;
  if (path.empty()) throw_error("no {} given (the file name is empty)", what);
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) {
    if (fs::is_symlink(fs::symlink_status(path, ec)))
      throw_error("{} '{}' is a symbolic link to a file that does not exist", what, path.string());
    throw_error("{} '{}' does not exist", what, path.string());
  }
  if (ec) throw_error("cannot access {} '{}': {}", what, path.string(), ec.message());
  if (status.type() == fs::file_type::directory)
    throw_error("{} '{}' is a directory; give the file inside it", what, path.string());
  if (status.type() != fs::file_type::regular)
    throw_error("{} '{}' is not a regular file (a device, pipe or socket)", what, path.string());
  if (::access(path.c_str(), R_OK) != 0)
    throw_error("cannot read {} '{}': {}", what, path.string(), std::strerror(errno));
}

std::string read_input_file(const std::filesystem::path& path, std::string_view what, uint64_t max_bytes) {
  require_input_file(path, what);
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw_error("cannot read {} '{}': {}", what, path.string(), ec.message());
  if (size > max_bytes)
    throw_error("{} '{}' is {} bytes; at most {} are accepted", what, path.string(), size, max_bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("cannot read {} '{}': {}", what, path.string(), std::strerror(errno));
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw_error("cannot read {} '{}': read error", what, path.string());
  return bytes;
}

std::string read_text_file(const std::filesystem::path& path) {
  std::string text = read_input_file(path, "text file");
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace okapi
