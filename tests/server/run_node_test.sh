#!/usr/bin/env bash
# Runs one tests/server/*.test.mjs file against the okapi binary given as $1 (CTest calls this).
# Without node or tests/server/node_modules (scripts/setup.sh installs them) the test is skipped
# (exit 77), or fails under OKAPI_REQUIRE_GOLDEN=1 as CI sets it.
set -euo pipefail
okapi_bin=$1
test_file=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node > /dev/null || [ ! -d "$here/node_modules/openai" ]; then
  echo "node or tests/server/node_modules missing: run scripts/setup.sh"
  if [ "${OKAPI_REQUIRE_GOLDEN:-0}" != "0" ] && [ -n "${OKAPI_REQUIRE_GOLDEN:-}" ]; then exit 1; fi
  exit 77
fi
export OKAPI_BIN=$okapi_bin
exec node --test --test-concurrency=1 "$here/$test_file"
