#!/usr/bin/env bash
# The test suite once more under AddressSanitizer + UndefinedBehaviorSanitizer, built with clang++
# (build-asan/): the library at -O1 with line tables, the test files at -O0. Compiling is most of
# this run's time: clang++ builds the sanitized code about 1.5x faster than g++, and at -O0 the
# test files cost half of -O1 while the tests' time stays in the -O1 library.
# Being a clang++ build, this is also exact mode's cross-compiler check: the -O2 g++ suite and this
# build must both reproduce the committed logits digest (tests/runtime/exact_identity_test.cpp);
# scripts/test_exact_identity.sh reports it, and builds clang++ -O2 and g++ -O0 on request.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
dir=build-asan
# A build-asan/ configured with another compiler (g++ before 2026-11) is reconfigured from scratch.
if [[ -f "$dir/CMakeCache.txt" ]] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$dir/CMakeCache.txt"; then
  rm -rf "$dir"
fi
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" -DOKAPI_TEST_COMPILE_OPTIONS=-O0 -DOKAPI_SANITIZE=ON \
  -DOKAPI_BUILD_BENCH=OFF "${launcher[@]}"
cmake --build "$dir" -j "$(nproc)"
# Left out: the scalar- and AVX2-tier copies of the ternary models' golden tests (the `scalar.` and
# `avx2.` prefixes, tests/CMakeLists.txt), minutes of test time under the sanitizers. Their
# AVX-512 runs are here, the kernel tests here check every tier against the scalar reference, and
# the -O2 suite runs every tier's copy.
OKAPI_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" -E '^(scalar|avx2)\.'
