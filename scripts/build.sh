#!/usr/bin/env bash
# Configures okapi in build/ (Release) and builds what running needs: the `okapi` binary and its
# libraries (scripts/test.sh builds the rest: tests, benchmarks). Extra arguments go to cmake's
# configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@"
cmake --build build -j "$(nproc)" --target okapi_cli
