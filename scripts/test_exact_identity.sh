#!/usr/bin/env bash
# Exact mode's cross-compiler guarantee (docs/exact-mode.md): the exact-mode identity test, whose
# logits digest was derived from the gcc Release build, must pass unchanged in a clang++ Release
# build. (The gcc -O0 case is the Debug ASan build of scripts/test_sanitized.sh.) Builds only the
# CLI and that test, in build-exact-clang/ (OKAPI_EXACT_BUILD_PREFIX=name changes "build-exact";
# ccache is used when installed). OKAPI_EXACT_O0=1 also builds and checks a plain gcc -O0 build.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
prefix="${OKAPI_EXACT_BUILD_PREFIX:-build-exact}"
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
targets=(--target okapi_cli runtime_exact_identity_test)

build_and_check() {  # build dir, cmake args...
  local dir="$1"
  shift
  cmake -S . -B "$dir" -G Ninja -DOKAPI_BUILD_BENCH=OFF "${launcher[@]}" "$@"
  cmake --build "$dir" -j "$jobs" "${targets[@]}"
  "$dir/tests/runtime_exact_identity_test" --gtest_brief=1
}

build_and_check "$prefix-clang" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release
if [[ "${OKAPI_EXACT_O0:-0}" == 1 ]]; then
  build_and_check "$prefix-O0" -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Debug
fi
echo "exact identity: the clang++ build reproduces the committed logits digest"
