// libFuzzer target for the GGUF reader. Any input must either be rejected with okapi::Error or
// parse into a File whose every metadata value and tensor byte can be read. Accepted files must
// also survive a writer round trip: the rewritten bytes parse to the same metadata and tensors.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"

namespace {

using okapi::gguf::File;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "gguf_reader_fuzz: %s\n", what);
  std::abort();
}

uint64_t touch_everything(const File& file) {
  uint64_t sum = file.version() + file.alignment() + file.data_offset();
  for (const auto& kv : file.metadata()) {
    sum += kv.key.size() + kv.value.to_display(SIZE_MAX).size();
  }
  sum += file.architecture().size();
  for (const auto& t : file.tensors()) {
    sum += static_cast<uint64_t>(t.n_elements() + t.n_rows());
    for (uint8_t byte : t.bytes()) sum += byte;
    if (file.find_tensor(t.name) == nullptr) fail("find_tensor misses a listed tensor");
  }
  return sum;
}

void check_round_trip(const File& file) {
  okapi::gguf::Writer writer;
  writer.copy_metadata(file);
  for (const auto& t : file.tensors()) writer.add_tensor_view(t.name, t.type, t.shape, t.bytes());
  const std::vector<uint8_t> bytes = writer.to_bytes();  // an accepted file must be writable
  const File again = File::parse(bytes, "rewritten");
  if (again.metadata().size() != file.metadata().size()) fail("metadata count changed");
  for (size_t i = 0; i < file.metadata().size(); ++i) {
    const auto& a = file.metadata()[i];
    const auto& b = again.metadata()[i];
    if (a.key != b.key || a.value.to_display(SIZE_MAX) != b.value.to_display(SIZE_MAX)) fail("metadata changed");
  }
  if (again.tensors().size() != file.tensors().size()) fail("tensor count changed");
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const auto& a = file.tensors()[i];
    const auto& b = again.tensors()[i];
    if (a.name != b.name || a.type != b.type || a.shape != b.shape || a.nbytes != b.nbytes ||
        std::memcmp(a.data, b.data, a.nbytes) != 0) {
      fail("tensor changed");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<File> file;
  try {
    file.emplace(File::parse({data, size}, "fuzz.gguf"));
  } catch (const okapi::Error&) {
    return 0;  // rejected cleanly
  }
  volatile uint64_t sink = touch_everything(*file);
  (void)sink;
  check_round_trip(*file);  // outside the try: a writer error on an accepted file is a bug
  return 0;
}
