#!/usr/bin/env bash
# deploy/run-replicas.sh N [options] [-- okapi serve flags]
#
# Starts N `okapi serve` replicas (on ports BASE..BASE+N-1, or --replica-ports) and HAProxy in front
# of them (deploy/haproxy/haproxy.cfg.in), then stays in the foreground, restarting a replica that
# exits, until Ctrl-C or SIGTERM stops everything. SIGHUP restarts the replicas one at a time (a
# rolling restart: each drains, HAProxy sends its requests to the others meanwhile).
#
#   -m, --model FILE        the model every replica serves (default: okapi's bundled stories260K)
#   -t, --threads T         -t of each replica (default 1)
#   -np, --parallel N       slots of each replica (default 4)
#   -c, --ctx-size N        -c of each replica (default: okapi's)
#   --port P                HAProxy's port (default 8080)
#   --base-port B           the first replica's port (default 8081)
#   --replica-ports LIST    the replicas' ports, comma-separated, instead of --base-port
#   --stats-port P          HAProxy's stats page at http://HOST:P/ and its Prometheus /metrics (default 8404)
#   --host H                the address HAProxy and its stats page listen on (default 127.0.0.1);
#                           the replicas always listen on 127.0.0.1
#   --drain-delay S         each replica's --drain-delay (default 3: twice what HAProxy's checks
#                           need to see a replica's /health turn 503)
#   --run-dir DIR           the generated haproxy.cfg and the logs (default: a new folder in $TMPDIR)
#   --okapi BIN             the okapi binary (default: $OKAPI_BIN, else build/okapi, else okapi on PATH)
#   --haproxy BIN           the haproxy binary (default: haproxy on PATH, else /usr/sbin/haproxy)
#   -- FLAGS...             more `okapi serve` flags for every replica
#
# Prints "run-replicas: ready: http://HOST:PORT" once HAProxy listens and every replica is healthy.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
prog=run-replicas

die() { echo "$prog: error: $*" >&2; exit 2; }
say() { echo "$prog: $*"; }

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_port() { is_uint "$1" && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]; }
need_value() { [ $# -ge 2 ] || die "$1 needs a value"; }

[ $# -ge 1 ] || die "usage: deploy/run-replicas.sh N [options] [-- okapi serve flags] (see the script's header)"
case $1 in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
esac
count=$1
shift
is_uint "$count" && [ "$count" -ge 1 ] && [ "$count" -le 64 ] || die "N must be a whole number from 1 to 64, got '$count'"

model="" threads=1 slots=4 ctx="" port=8080 base_port=8081 replica_ports="" stats_port=8404 host=127.0.0.1
drain_delay=3 run_dir="" okapi="${OKAPI_BIN:-}" haproxy="" extra=()
while [ $# -gt 0 ]; do
  case $1 in
    -m|--model) need_value "$@"; model=$2; shift 2 ;;
    -t|--threads) need_value "$@"; threads=$2; shift 2 ;;
    -np|--parallel) need_value "$@"; slots=$2; shift 2 ;;
    -c|--ctx-size) need_value "$@"; ctx=$2; shift 2 ;;
    --port) need_value "$@"; port=$2; shift 2 ;;
    --base-port) need_value "$@"; base_port=$2; shift 2 ;;
    --replica-ports) need_value "$@"; replica_ports=$2; shift 2 ;;
    --stats-port) need_value "$@"; stats_port=$2; shift 2 ;;
    --host) need_value "$@"; host=$2; shift 2 ;;
    --drain-delay) need_value "$@"; drain_delay=$2; shift 2 ;;
    --run-dir) need_value "$@"; run_dir=$2; shift 2 ;;
    --okapi) need_value "$@"; okapi=$2; shift 2 ;;
    --haproxy) need_value "$@"; haproxy=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (okapi serve flags go after --)" ;;
  esac
done

is_uint "$threads" && [ "$threads" -ge 1 ] || die "--threads must be a positive whole number, got '$threads'"
is_uint "$slots" && [ "$slots" -ge 1 ] || die "--parallel must be a positive whole number, got '$slots'"
[ -z "$ctx" ] || is_uint "$ctx" || die "--ctx-size must be a whole number, got '$ctx'"
is_port "$port" || die "--port must be a port number (1-65535), got '$port'"
is_port "$stats_port" || die "--stats-port must be a port number (1-65535), got '$stats_port'"
[[ $drain_delay =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--drain-delay must be a number of seconds, got '$drain_delay'"
[ -z "$model" ] || [ -f "$model" ] || die "model file '$model' not found"

ports=()
if [ -n "$replica_ports" ]; then
  IFS=, read -r -a ports <<< "$replica_ports"
  [ ${#ports[@]} -eq "$count" ] || die "--replica-ports lists ${#ports[@]} ports for $count replicas"
else
  is_port "$base_port" || die "--base-port must be a port number (1-65535), got '$base_port'"
  [ $((base_port + count - 1)) -le 65535 ] || die "--base-port $base_port leaves no room for $count replicas"
  for ((i = 0; i < count; i++)); do ports+=($((base_port + i))); done
fi
for p in "${ports[@]}"; do
  is_port "$p" || die "a replica port must be a port number (1-65535), got '$p'"
  [ "$p" != "$port" ] && [ "$p" != "$stats_port" ] || die "port $p is given to a replica and to HAProxy"
done
[ "$port" != "$stats_port" ] || die "--port and --stats-port are both $port"
[ "$(printf '%s\n' "${ports[@]}" | sort -u | wc -l)" -eq "$count" ] || die "two replicas share a port: ${ports[*]}"

if [ -z "$okapi" ]; then
  if [ -x "$repo/build/okapi" ]; then okapi=$repo/build/okapi; else okapi=$(command -v okapi || true); fi
fi
[ -n "$okapi" ] && [ -x "$okapi" ] || die "no okapi binary (build it, or give --okapi BIN or OKAPI_BIN)"
if [ -z "$haproxy" ]; then
  haproxy=$(command -v haproxy || true)
  [ -n "$haproxy" ] || haproxy=/usr/sbin/haproxy
fi
[ -x "$haproxy" ] || die "no haproxy binary at '$haproxy' (Debian: apt-get install haproxy, or give --haproxy BIN)"

if [ -z "$run_dir" ]; then
  run_dir=$(mktemp -d "${TMPDIR:-/tmp}/okapi-replicas.XXXXXX")
else
  mkdir -p "$run_dir" || die "cannot create --run-dir '$run_dir'"
fi

# The HAProxy config: one server line per replica in the checked backend, and one tracking it in
# the session-hashed one.
servers="" tracking=""
for ((i = 0; i < count; i++)); do
  servers+="    server r$i 127.0.0.1:${ports[i]}"$'\n'
  tracking+="    server r$i 127.0.0.1:${ports[i]} track replicas/r$i"$'\n'
done
config=$run_dir/haproxy.cfg
template=$here/haproxy/haproxy.cfg.in
[ -f "$template" ] || die "missing $template"
SERVERS=$servers TRACKING=$tracking BIND=$host PORT=$port STATS_PORT=$stats_port \
  awk '
    /^@SERVERS@$/ { printf "%s", ENVIRON["SERVERS"]; next }
    /^@TRACKING_SERVERS@$/ { printf "%s", ENVIRON["TRACKING"]; next }
    { gsub(/@STATS_BIND@/, ENVIRON["BIND"]); gsub(/@BIND@/, ENVIRON["BIND"]);
      gsub(/@STATS_PORT@/, ENVIRON["STATS_PORT"]); gsub(/@PORT@/, ENVIRON["PORT"]); print }
  ' "$template" > "$config"
"$haproxy" -c -q -f "$config" || die "haproxy rejects the generated $config"

serve_flags=(serve --host 127.0.0.1 -t "$threads" -np "$slots" --metrics --drain-delay "$drain_delay")
[ -z "$model" ] || serve_flags+=(-m "$model")
[ -z "$ctx" ] || serve_flags+=(-c "$ctx")
serve_flags+=("${extra[@]}")

pids=()
haproxy_pid=""
stopping=0
restart_requested=0

start_replica() {
  local i=$1
  "$okapi" "${serve_flags[@]}" --port "${ports[i]}" >> "$run_dir/replica-$i.log" 2>&1 &
  pids[i]=$!
  say "replica $i pid ${pids[i]} on http://127.0.0.1:${ports[i]} (log $run_dir/replica-$i.log)"
}

# /health of a replica answers 200 (bash's /dev/tcp: no curl needed).
healthy() {
  local status
  { exec 3<> "/dev/tcp/127.0.0.1/$1"; } 2> /dev/null || return 1
  printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
  IFS= read -r -t 5 status <&3 || status=""
  exec 3>&- 3<&-
  [[ $status == "HTTP/1."?" 200"* ]]
}

wait_healthy() {
  local i=$1 deadline=$((SECONDS + 300))
  until healthy "${ports[i]}"; do
    kill -0 "${pids[i]}" 2> /dev/null || { say "replica $i exited while loading (see $run_dir/replica-$i.log)"; return 1; }
    [ $SECONDS -lt $deadline ] || { say "replica $i not healthy within 300 s"; return 1; }
    sleep 0.2
  done
}

# HAProxy's stats (CSV) say replica i is UP, i.e. it gets requests again.
haproxy_sees_up() {
  local line
  { exec 4<> "/dev/tcp/127.0.0.1/$stats_port"; } 2> /dev/null || return 1
  printf 'GET /;csv HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&4
  while IFS= read -r -t 5 line <&4; do
    if [[ $line == "replicas,r$1,"* ]]; then
      exec 4>&- 4<&-
      [[ $line == *,UP,* ]]
      return
    fi
  done
  exec 4>&- 4<&-
  return 1
}

stop_all() {
  stopping=1
  trap '' INT TERM HUP
  # HAProxy stops listening and finishes the requests in flight (soft stop); the replicas drain.
  [ -z "$haproxy_pid" ] || kill -USR1 "$haproxy_pid" 2> /dev/null || true
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
  local deadline=$((SECONDS + 60))
  for pid in "${pids[@]}" $haproxy_pid; do
    while kill -0 "$pid" 2> /dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    kill -KILL "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
  done
  say "stopped"
}

on_exit() {
  local status=$?
  [ "$stopping" = 1 ] || stop_all
  exit "$status"
}
trap on_exit EXIT
trap 'exit 0' INT TERM
trap 'restart_requested=1' HUP

for ((i = 0; i < count; i++)); do start_replica "$i"; done
"$haproxy" -db -f "$config" >> "$run_dir/haproxy.log" 2>&1 &
haproxy_pid=$!
say "haproxy pid $haproxy_pid on http://$host:$port, stats http://$host:$stats_port/ (config $config, log $run_dir/haproxy.log)"
for ((i = 0; i < count; i++)); do wait_healthy "$i" || exit 1; done
say "ready: http://$host:$port"

# One replica at a time: SIGTERM (it drains after --drain-delay, HAProxy takes it out meanwhile),
# start it again, wait until it is healthy, then the next.
rolling_restart() {
  say "rolling restart"
  for ((i = 0; i < count; i++)); do
    kill -TERM "${pids[i]}" 2> /dev/null || true
    wait "${pids[i]}" 2> /dev/null || true
    [ "$stopping" = 0 ] || return 0
    start_replica "$i"
    wait_healthy "$i" || return 1
    # The next one goes only once HAProxy sends requests to this one again.
    local deadline=$((SECONDS + 30))
    until haproxy_sees_up "$i"; do
      [ $SECONDS -lt $deadline ] || { say "HAProxy does not see replica $i up within 30 s"; return 1; }
      sleep 0.2
    done
  done
  say "rolling restart done"
}

while :; do
  if ! kill -0 "$haproxy_pid" 2> /dev/null; then
    wait "$haproxy_pid" || true
    haproxy_pid=""
    say "haproxy exited (see $run_dir/haproxy.log)"
    exit 1
  fi
  if [ "$restart_requested" = 1 ]; then
    restart_requested=0
    rolling_restart || exit 1
  fi
  # A replica that exited (killed, crashed, or stopped on its own) is started again.
  for ((i = 0; i < count; i++)); do
    if ! kill -0 "${pids[i]}" 2> /dev/null; then
      status=0
      wait "${pids[i]}" 2> /dev/null || status=$?
      say "replica $i exited (status $status); starting it again"
      start_replica "$i"
    fi
  done
  sleep 0.2
done
