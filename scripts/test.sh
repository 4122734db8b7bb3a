#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, runs every test.
# Golden checks against ../shared run when it exists (override with OKAPI_SHARED=DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cmake --build build -j "$(nproc)"  # everything else: tests, benchmarks, bench/lab
ctest --test-dir build --output-on-failure -j "$(nproc)"
