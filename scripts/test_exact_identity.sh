#!/usr/bin/env bash
# Exact mode's cross-build guarantee (docs/exact-mode.md): the exact-mode identity test, whose
# logits digest was derived from the gcc Release build, must pass unchanged in a gcc -O0 (Debug)
# build and a clang++ Release build. Builds only the CLI and that test, in build-exact-O0/ and
# build-exact-clang/ (OKAPI_EXACT_BUILD_PREFIX=name changes "build-exact"; ccache is used when
# installed).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
prefix="${OKAPI_EXACT_BUILD_PREFIX:-build-exact}"
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
targets=(--target okapi_cli runtime_exact_identity_test)

run_identity() {  # build dir
  "$1/tests/runtime_exact_identity_test" --gtest_brief=1
}

cmake -S . -B "$prefix-O0" -G Ninja -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Debug -DOKAPI_BUILD_BENCH=OFF \
  "${launcher[@]}"
cmake --build "$prefix-O0" -j "$jobs" "${targets[@]}"
run_identity "$prefix-O0"

cmake -S . -B "$prefix-clang" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
  -DOKAPI_BUILD_BENCH=OFF "${launcher[@]}"
cmake --build "$prefix-clang" -j "$jobs" "${targets[@]}"
run_identity "$prefix-clang"
echo "exact identity: gcc -O0 and clang++ builds reproduce the committed logits digest"
