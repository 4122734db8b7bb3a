// okapi_make_hparams_corpus OUTDIR: writes a tiny valid model of each architecture and its
// hyper-parameter mutations (tests/support/tiny_models), the seeds of fuzz/hparams_fuzz.
#include <cstdio>
#include <exception>

#include "support/tiny_models.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  try {
    okapi::test::write_hparams_corpus(argv[1]);
    std::printf("wrote the hparams corpus to %s\n", argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
