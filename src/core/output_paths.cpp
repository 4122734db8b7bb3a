#include "core/output_paths.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <string_view>
#include <system_error>

#include "core/error.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;

// Absolute and lexically normal ("a/./b/../c" -> "a/c"); links are not resolved.
fs::path lexical(const fs::path& p) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(p, ec);
  return (ec ? p : absolute).lexically_normal();
}

// Absolute with every link of the existing part resolved.
fs::path resolved(const fs::path& p) {
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(lexical(p), ec);
  return ec ? lexical(p) : canonical;
}

bool is_link(const fs::path& p) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(p, ec));
}

// True when `path` is `dir` itself or lies below it.
bool lies_inside(const fs::path& path, const fs::path& dir) {
  const auto below = [](const fs::path& p, const fs::path& d) {
    auto pi = p.begin();
    for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
      if (di->empty()) continue;  // the trailing "" of "dir/"
      if (pi == p.end() || *pi != *di) return false;
    }
    return true;
  };
  return below(lexical(path), lexical(dir)) || below(resolved(path), resolved(dir));
}

std::string quoted(const NamedPath& p) { return fmt::format("{} '{}'", p.what, p.path.string()); }

void check_not_input(const NamedPath& output, const std::vector<NamedPath>& inputs) {
  for (const NamedPath& input : inputs) {
    if (const auto reason = same_file_reason(output.path, input.path)) {
      throw_error("{} is the same file as {} ({}): writing it would replace the input; choose another path for {}",
                  quoted(output), quoted(input), *reason, output.what);
    }
  }
}

// The entries whose path was given (optional flags left out are empty).
std::vector<NamedPath> given(std::initializer_list<const std::vector<NamedPath>*> lists) {
  std::vector<NamedPath> out;
  for (const auto* list : lists) {
    for (const NamedPath& p : *list) {
      if (!p.path.empty()) out.push_back(p);
    }
  }
  return out;
}

bool all_digits(std::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (const char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c)) == 0) return false;
  }
  return true;
}

// True when `dir` (resolved) is this process's descriptor table: /proc/<pid>/fd or
// /proc/<pid>/task/<tid>/fd (what /proc/self/fd, /dev/fd and /proc/thread-self/fd resolve to).
bool is_own_fd_directory(const fs::path& dir) {
  std::vector<std::string> parts;
  for (const fs::path& part : dir) parts.push_back(part.string());
  const std::string pid = std::to_string(::getpid());
  if (parts.size() == 4) return parts[0] == "/" && parts[1] == "proc" && parts[2] == pid && parts[3] == "fd";
  return parts.size() == 6 && parts[0] == "/" && parts[1] == "proc" && parts[2] == pid && parts[3] == "task" &&
         all_digits(parts[4]) && parts[5] == "fd";
}

// The descriptor of this process that `path` names, following symbolic links one at a time until
// a link's own name lies in /proc/<pid>/fd.
std::optional<int> own_descriptor(const fs::path& path) {
  fs::path p = lexical(path);
  for (int hop = 0; hop < 40; ++hop) {
    std::error_code ec;
    fs::path dir = fs::weakly_canonical(p.parent_path(), ec);
    if (ec) dir = p.parent_path();
    if (is_own_fd_directory(dir) && all_digits(p.filename().string())) return std::stoi(p.filename().string());
    if (!is_link(p)) return std::nullopt;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) return std::nullopt;
    p = (target.is_absolute() ? target : dir / target).lexically_normal();
  }
  return std::nullopt;
}

}  // namespace

OutputTarget output_target(const fs::path& path) {
  if (const auto fd = own_descriptor(path)) return {OutputTarget::Kind::kInPlace, *fd};
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return {OutputTarget::Kind::kFile, -1};
  if (S_ISDIR(st.st_mode)) return {OutputTarget::Kind::kDirectory, -1};
  return {OutputTarget::Kind::kInPlace, -1};
}

bool written_in_place(const fs::path& path) { return output_target(path).kind == OutputTarget::Kind::kInPlace; }

bool names_stdout(const fs::path& path) { return output_target(path).descriptor == STDOUT_FILENO; }

std::FILE* report_stream(std::initializer_list<fs::path> outputs) {
  for (const fs::path& output : outputs) {
    if (!output.empty() && names_stdout(output)) return stderr;
  }
  return stdout;
}

std::optional<std::string> same_file_reason(const fs::path& a, const fs::path& b) {
  // Existing files are the same exactly when device and inode are; spellings can mislead ("d/.."
  // where d is a link), so they only decide for paths that do not exist yet.
  struct stat sa{}, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) {
    if (sa.st_dev != sb.st_dev || sa.st_ino != sb.st_ino) return std::nullopt;
  } else if (resolved(a) != resolved(b)) {
    return std::nullopt;
  }
  if (a == b) return "the same path";
  if (lexical(a) == lexical(b)) return "the same path, written differently";
  for (const fs::path& p : {a, b}) {
    if (is_link(p)) return fmt::format("'{}' is a symbolic link", p.string());
  }
  if (resolved(a) == resolved(b)) return "the same path through a linked directory";
  return "hard links: the same device and inode";
}

void check_output_plan(const OutputPlan& plan) {
  const std::vector<NamedPath> inputs = given({&plan.inputs});
  const std::vector<NamedPath> files = given({&plan.outputs, &plan.sidecars});
  std::error_code ec;
  for (const NamedPath& file : files) {
    check_not_input(file, inputs);
    if (fs::is_directory(file.path, ec)) {
      throw_error("{} is a directory; give a file name for {}", quoted(file), file.what);
    }
  }
  for (const NamedPath& dir : given({&plan.directories, &plan.owned_directories})) {
    check_not_input(dir, inputs);
    if (fs::exists(dir.path, ec) && !fs::is_directory(dir.path, ec)) {
      throw_error("{} is a file, not a directory; choose another path for {}", quoted(dir), dir.what);
    }
    for (const NamedPath& file : files) {  // a directory not made yet, named as a file too
      if (same_file_reason(file.path, dir.path)) {
        throw_error("{} is also {}; choose another path for {}", quoted(file), quoted(dir), file.what);
      }
    }
  }
  for (size_t i = 0; i < files.size(); ++i) {
    for (size_t j = i + 1; j < files.size(); ++j) {
      if (const auto reason = same_file_reason(files[i].path, files[j].path)) {
        throw_error("{} and {} are the same file ({}): one would replace the other; choose another path for {}",
                    quoted(files[i]), quoted(files[j]), *reason, files[i].what);
      }
    }
  }
  for (const NamedPath& dir : given({&plan.owned_directories})) {
    for (const NamedPath& p : given({&plan.inputs, &plan.outputs, &plan.sidecars})) {
      if (lies_inside(p.path, dir.path)) {
        throw_error("{} lies inside {}, whose files are written and deleted under their own names; move it out",
                    quoted(p), quoted(dir));
      }
    }
  }
  for (const NamedPath& sidecar : given({&plan.sidecars})) {
    if (!plan.force && fs::exists(fs::symlink_status(sidecar.path, ec))) {
      throw_error("{} exists; pass {} to replace it", quoted(sidecar), plan.force_flag);
    }
  }
}

void check_output_path(const NamedPath& output, const std::vector<NamedPath>& inputs) {
  OutputPlan plan;
  plan.inputs = inputs;
  plan.outputs = {output};
  check_output_plan(plan);
}

}  // namespace okapi
