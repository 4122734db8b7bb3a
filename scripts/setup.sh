#!/usr/bin/env bash
# Installs okapi's build and test dependencies (Debian 12 packages only).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  build-essential cmake ninja-build pkg-config git
  libfmt-dev nlohmann-json3-dev libcli11-dev libssl-dev libpcre2-dev libicu-dev liblapacke-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  python3-jinja2 python3-jsonschema
  libcpp-httplib-dev
  libcurl4-openssl-dev
  haproxy
  chromium
)
# okapi serve's client tests run on Node (tests/server): Debian's nodejs and npm unless a node is
# already installed (a NodeSource node carries its own npm and conflicts with Debian's).
command -v node > /dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies present"
else
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
fi
# The client libraries of tests/server (openai, playwright-core without its browsers: the tests
# drive Debian's chromium), pinned by its package-lock.json; reinstalled when the lock changes.
lock=tests/server/package-lock.json
stamp=tests/server/node_modules/.okapi-lock
if [ ! -f "$stamp" ] || ! cmp -s "$lock" "$stamp"; then
  echo "setup: npm ci in tests/server"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix tests/server --no-audit --no-fund
  cp "$lock" "$stamp"
fi
