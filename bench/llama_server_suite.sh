#!/usr/bin/env bash
# llama.cpp's own server test suite (tools/server/tests, `-m "not slow"`) against okapi, two ways:
#   wrapper/  through ../shared/llama-server-suite's okapi-as-llama-server.sh, which maps llama-server's
#             command line to `okapi serve` and drops (logs) every flag it has no mapping for;
#   native/   okapi as llama-server itself: build/llama-server is a hard link to okapi, which then takes
#             llama-server's command line unchanged (tools/okapi/main.cpp), so every flag reaches okapi.
# Each folder gets summary.txt (per file), tests.tsv, report.md (every failure classified against the
# llama-server baseline) and pytest.log. About a minute each on 2 cores.
# usage: bench/llama_server_suite.sh [OUTDIR (default /tmp/okapi-llama-server-suite)] [wrapper|native|both]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/okapi-llama-server-suite}
which=${2:-both}
suite=${OKAPI_SHARED_DIR:-../shared}/llama-server-suite
[ -x "$suite/run-suite.sh" ] || { echo "okapi: error: no llama-server suite at $suite" >&2; exit 1; }
[ -x build/okapi ] || { echo "okapi: error: build/okapi is missing: run scripts/build.sh" >&2; exit 1; }
[ build/llama-server -ef build/okapi ] || { rm -f build/llama-server; ln build/okapi build/llama-server; }
mkdir -p "$out"
if [ "$which" != native ]; then
  bash "$suite/run-suite.sh" build/okapi "$out/wrapper"
fi
if [ "$which" != wrapper ]; then
  bash "$suite/run-suite.sh" --llama-server build/llama-server "$out/native"
  python3 "$suite/report.py" "$out/native/junit.xml" "$suite/baseline-llama-server-tests.tsv" > "$out/native/report.md"
fi
for d in wrapper native; do
  [ -f "$out/$d/summary.txt" ] && { echo "== $d"; tail -n 1 "$out/$d/summary.txt"; }
done
echo "columns: tests nomodel openai skip runnable pass fail; reports under $out/{wrapper,native}/report.md"
