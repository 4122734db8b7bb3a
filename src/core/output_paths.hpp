// The one check every writing verb runs before any work: no output may replace a file the verb
// reads. Paths are compared as files, not as spellings: the same path however written ("./x",
// "d/../x", absolute or relative), a symbolic link to the other (either way, through chains) or a
// hard link to it (same device and inode) all name the same file. Outputs must not name the same
// file as each other, nor an existing directory; a file the user did not name (a sidecar such as
// logits' OUT.json) never replaces an existing file unless forced.
#pragma once
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace okapi {

struct NamedPath {
  std::filesystem::path path;
  // How the user gave it, for messages: "-o", "--model", "the input"; for a sidecar what it is,
  // e.g. "the JSON beside -o".
  std::string what;
};

struct OutputPlan {
  std::vector<NamedPath> inputs;   // files the verb reads
  std::vector<NamedPath> outputs;  // files the user named; an existing one is replaced
  std::vector<NamedPath> sidecars;  // files the user did not name; an existing one is refused unless force
  // Directories the verb creates and writes into: neither an input nor an existing file.
  std::vector<NamedPath> directories;
  // Directories whose files the verb names itself and may replace or delete (a checkpoint folder,
  // a cache): no input or output may lie inside one.
  std::vector<NamedPath> owned_directories;
  bool force = false;
  std::string force_flag = "--force";  // named in the sidecar message
};

// Throws okapi::Error naming both paths and what to do.
void check_output_plan(const OutputPlan& plan);
// The common case: one output the user named, and what the verb reads.
void check_output_path(const NamedPath& output, const std::vector<NamedPath>& inputs = {});

// Why `a` and `b` are the same file ("the same path", "a symbolic link to it", "a hard link to
// it", ...), or nothing when they are not. Paths that do not exist compare as normalized absolute
// paths with the links of their existing parents resolved.
std::optional<std::string> same_file_reason(const std::filesystem::path& a, const std::filesystem::path& b);

// How an output is written (AtomicFileWriter). A regular file, or a name that does not exist yet,
// is written to a temp file beside it that is renamed over it when complete. Anything else that
// exists (a character or block device, a FIFO, a socket; through symbolic links, as the link's
// target) is written in place: opened for writing, never replaced, removed or truncated; so is one
// of this process's own descriptors (/dev/stdout, /dev/fd/N, /proc/self/fd/N), whatever it is open
// on, through that descriptor (a shell's `>>` keeps appending). A directory is refused.
struct OutputTarget {
  enum class Kind { kFile, kInPlace, kDirectory };
  Kind kind = Kind::kFile;
  int descriptor = -1;  // >= 0: this process's descriptor the path names
};
OutputTarget output_target(const std::filesystem::path& path);
bool written_in_place(const std::filesystem::path& path);
// True when `path` names this process's standard output (/dev/stdout, /dev/fd/1, ...): a verb that
// writes its data there prints its report to stderr instead (report_stream).
bool names_stdout(const std::filesystem::path& path);
// stdout, or stderr when any of `outputs` is written to stdout.
std::FILE* report_stream(std::initializer_list<std::filesystem::path> outputs);

}  // namespace okapi
