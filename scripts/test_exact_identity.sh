#!/usr/bin/env bash
# Exact mode's cross-compiler guarantee (docs/exact-mode.md): the exact-mode identity test, whose
# logits digest was derived from the gcc Release build, must pass unchanged in clang++ builds.
# By default this builds the CLI and that test with clang++ -O2 in build-exact-clang/
# (OKAPI_EXACT_BUILD_PREFIX=name changes "build-exact"; ccache is used when installed);
# OKAPI_EXACT_O0=1 also builds and checks a plain g++ -O0 build.
# OKAPI_EXACT_REUSE_BUILD=DIR builds nothing and runs the test in DIR, which must be a clang++ build:
# CI passes build-asan/, the clang++ build of scripts/test_sanitized.sh, so that a third build of
# the code base does not cost CI 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
prefix="${OKAPI_EXACT_BUILD_PREFIX:-build-exact}"
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
targets=(--target okapi_cli runtime_exact_identity_test)

compiler_of() {  # build dir -> the C++ compiler its CMake cache names
  sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$1/CMakeCache.txt"
}

build_and_check() {  # build dir, cmake args...
  local dir="$1"
  shift
  cmake -S . -B "$dir" -G Ninja -DOKAPI_BUILD_BENCH=OFF "${launcher[@]}" "$@"
  cmake --build "$dir" -j "$jobs" "${targets[@]}"
  "$dir/tests/runtime_exact_identity_test" --gtest_brief=1
}

if [[ -n "${OKAPI_EXACT_REUSE_BUILD:-}" ]]; then
  dir="$OKAPI_EXACT_REUSE_BUILD"
  if [[ ! -f "$dir/CMakeCache.txt" || ! -x "$dir/tests/runtime_exact_identity_test" ]]; then
    echo "test_exact_identity: error: $dir has no built runtime_exact_identity_test" >&2
    exit 1
  fi
  compiler="$(compiler_of "$dir")"
  if [[ "$compiler" != *clang++* ]]; then
    echo "test_exact_identity: error: $dir was built with '$compiler', not clang++" >&2
    exit 1
  fi
  flags="$(sed -n 's/^CMAKE_CXX_FLAGS_DEBUG:[A-Z]*=//p' "$dir/CMakeCache.txt")"
  # The sanitized run's own environment: its leak check and UBSan abort apply here too.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$dir/tests/runtime_exact_identity_test" --gtest_brief=1
  echo "exact identity: the clang++ build in $dir ($flags) reproduces the committed logits digest"
  exit 0
fi

build_and_check "$prefix-clang" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release
if [[ "${OKAPI_EXACT_O0:-0}" == 1 ]]; then
  build_and_check "$prefix-O0" -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Debug
fi
echo "exact identity: the clang++ -O2 build reproduces the committed logits digest"
