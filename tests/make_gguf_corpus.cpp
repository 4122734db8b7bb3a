// okapi_make_gguf_corpus OUTDIR: writes the malformed-GGUF corpus (tests/support/malformed_gguf)
// plus the valid file it is derived from, e.g. as seeds for fuzz/gguf_reader_fuzz.
#include <cstdio>
#include <exception>

#include "support/malformed_gguf.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  try {
    okapi::test::write_gguf_corpus(argv[1]);
    std::printf("wrote %zu files to %s\n", okapi::test::malformed_gguf_corpus().size() + 1, argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
