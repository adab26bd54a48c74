#!/usr/bin/env bash
# rpclb beside its peers, one run: installs the peer packages (idempotent), builds rpclb's
# benches and bench/peers (-DRPCLB_BUILD_PEER_BENCH=ON) into build-peers/, then, pinned to
# CPU 0 and unpinned, runs
#   bench/rpc_roundtrip        rpclb latency and the raw TCP floor (raw_tcp)
#   bench/rpc_throughput       rpclb throughput and the raw pipelined floor, when the tree has it
#   bench/peers/raw_pipelined  the raw pipelined floor when rpc_throughput is not there
#   bench/peers/grpc_echo      gRPC C++ sync unary latency, callback-API throughput (64 in flight)
#   bench/peers/erpc_echo      Erlang erpc:call latency, throughput from 64 processes
# and prints per mode one table (stack | median µs | p99 µs | × raw | calls/s) and
# vs_grpc_latency, vs_grpc_throughput, vs_erpc_latency, vs_erpc_throughput (rpclb ÷ peer;
# targets: vs_grpc_latency ≤ 0.6, vs_erpc_latency ≤ 0.7, throughput ≥ 3.0 against both). Raw outputs go to build-peers/peers-logs/.
# Usage: bash scripts/bench-peers.sh [--count N] [--seconds S] [--modes "pinned unpinned"] [--no-install]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_PEERS_BUILD_DIR:-$root/build-peers}"
count=20000
warmup=2000
seconds=3
modes="pinned unpinned"
install=1
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --no-install) install=0; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "bench-peers: unknown option $1" >&2; exit 2 ;;
  esac
done

# ---- packages ------------------------------------------------------------------------------
if [ "$install" = 1 ]; then
  packages=(libgrpc++-dev protobuf-compiler-grpc protobuf-compiler erlang-base util-linux)
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "bench-peers: installing ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
  fi
fi

# ---- build ---------------------------------------------------------------------------------
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRPCLB_BUILD_TESTS=OFF \
      -DRPCLB_BUILD_PEER_BENCH=ON "${launcher[@]}" >/dev/null
targets=(bench_rpc_roundtrip peer_benches)
have_throughput=0
if [ -f "$root/bench/rpc_throughput.cpp" ]; then targets+=(bench_rpc_throughput); have_throughput=1; fi
ninja -C "$build" -j "${RPCLB_JOBS:-2}" "${targets[@]}" >/dev/null

logs="$build/peers-logs"
mkdir -p "$logs"

# ---- Erlang: a private epmd and the client node; both reaped on every exit -----------------
epmd_pid=""
client_pid=""
server_os_pid=""
cleanup() {
  if [ -n "$client_pid" ]; then kill -KILL "$client_pid" 2>/dev/null || true; wait "$client_pid" 2>/dev/null || true; fi
  # The server node halts when the client's connection drops; kill it if it has not.
  if [ -n "$server_os_pid" ]; then
    # Gone, or a zombie waiting for init (its parent, the client VM, has exited).
    for _ in $(seq 100); do
      state=$(awk '{print $3}' "/proc/$server_os_pid/stat" 2>/dev/null || true)
      [ -z "$state" ] || [ "$state" = Z ] && break
      sleep 0.1
    done
    if [ -n "$state" ] && [ "$state" != Z ]; then
      echo "bench-peers: Erlang server node $server_os_pid still running; killing it" >&2
      kill -KILL "$server_os_pid" 2>/dev/null || true
    fi
  fi
  if [ -n "$epmd_pid" ]; then kill "$epmd_pid" 2>/dev/null || true; wait "$epmd_pid" 2>/dev/null || true; fi
  client_pid="" server_os_pid="" epmd_pid=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# epmd in the foreground on a port of its own (not 4369), so that it is our child.
start_epmd() {
  for _ in 1 2 3 4 5; do
    epmd_port=$((20000 + RANDOM % 30000))
    epmd -port "$epmd_port" -address 127.0.0.1 >/dev/null 2>&1 &
    epmd_pid=$!
    for _ in $(seq 50); do
      ERL_EPMD_PORT=$epmd_port epmd -names >/dev/null 2>&1 && return 0
      kill -0 "$epmd_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$epmd_pid" 2>/dev/null; wait "$epmd_pid" 2>/dev/null || true
    epmd_pid=""
  done
  echo "bench-peers: epmd did not start" >&2
  return 1
}

run_erpc() {  # $1 = pinned|unpinned; output on stdout
  local pin=()
  [ "$1" = pinned ] && pin=(taskset -c 0)
  start_epmd
  ERL_EPMD_PORT=$epmd_port "${pin[@]}" erl -noshell -start_epmd false -name peers_erpc_client@127.0.0.1 \
      -setcookie rpclb-peers-bench -pa "$build/bench/peers" \
      -run erpc_echo main "$count" "$warmup" "$seconds" 64 > "$logs/erpc.$1.out" 2> "$logs/erpc.$1.err" &
  client_pid=$!
  local rc=0
  wait "$client_pid" || rc=$?
  client_pid=""
  server_os_pid=$(sed -n 's/.*server_os_pid=\([0-9]*\).*/\1/p' "$logs/erpc.$1.out")
  cleanup
  cat "$logs/erpc.$1.out"
  [ "$rc" = 0 ] || { echo "bench-peers: erpc_echo failed, see $logs/erpc.$1.err" >&2; return 1; }
}

# ---- parsing -------------------------------------------------------------------------------
field() {  # $1 file, $2 line label, $3 key: value of key=... on the first line "label ..."
  awk -v label="$2" -v key="$3" '$1 == label {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key) { print kv[2]; exit } } }' "$1"
}
field9() {  # as field, but only lines with payload=9 (rpc_throughput prints one per payload)
  awk -v label="$2" -v key="$3" '$1 == label && / payload=9 / {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key) { print kv[2]; exit } } }' "$1"
}
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }

row() {  # stack median p99 raw_median rate
  local x
  x=$(div "$2" "$4")
  printf '| %-38s | %10s | %10s | %6s | %9s |\n' "$1" "${2:-n/a}" "${3:-n/a}" "$x" "${5:-n/a}"
}

verdict() {  # name value op target
  local v="$2"
  if [ "$v" = n/a ]; then printf '%s n/a\n' "$1"; return; fi
  local ok
  ok=$(awk -v v="$v" -v t="$4" -v op="$3" 'BEGIN { print ((op == "le" ? v <= t : v >= t) ? "met" : "missed") }')
  printf '%s %s   (target %s %s: %s)\n' "$1" "$v" "$( [ "$3" = le ] && echo '≤' || echo '≥')" "$4" "$ok"
}

# ---- one mode ------------------------------------------------------------------------------
run_mode() {  # $1 = pinned|unpinned
  local mode=$1 flag=--pin
  [ "$mode" = unpinned ] && flag=--no-pin
  local rt="$logs/rpc_roundtrip.$mode.out" tp="$logs/rpc_throughput.$mode.out"
  local rp="$logs/raw_pipelined.$mode.out" gr="$logs/grpc.$mode.out" er="$logs/erpc.$mode.out"
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)

  "$build/bench/rpc_roundtrip" "$flag" --count "$count" --warmup "$warmup" > "$rt"
  # --no-tools: only the payload=9 line is compared here, and this build has no rpclb-node.
  if [ "$have_throughput" = 1 ]; then "$build/bench/rpc_throughput" "$flag" --no-tools > "$tp"; else : > "$tp"; fi
  "$build/bench/peers/grpc_echo" "$flag" --count "$count" --warmup "$warmup" --seconds "$seconds" > "$gr"
  run_erpc "$mode" > /dev/null

  # rpclb: the inline-handler line when rpc_roundtrip prints it, else today's "rpclb" line.
  local rl_label=rpclb_inline
  [ -n "$(field "$rt" rpclb_inline median_us)" ] || rl_label=rpclb
  local rl_med rl_p99 raw_med raw_p99 rl_rate raw_rate raw_rate_src
  rl_med=$(field "$rt" "$rl_label" median_us); rl_p99=$(field "$rt" "$rl_label" p99_us)
  raw_med=$(field "$rt" raw_tcp median_us); raw_p99=$(field "$rt" raw_tcp p99_us)
  rl_rate=$(field9 "$tp" rpclb_throughput calls_per_s)
  raw_rate=$(field9 "$tp" raw_pipelined calls_per_s)
  raw_rate_src="rpc_throughput raw_pipelined"
  if [ -z "$raw_rate" ]; then
    "$build/bench/peers/raw_pipelined" "$flag" --seconds "$seconds" > "$rp"
    raw_rate=$(field "$rp" peers_raw_pipelined calls_per_s)
    raw_rate_src="bench/peers/raw_pipelined (rpc_throughput not in this tree)"
  fi
  local g_med g_p99 g_rate e_med e_p99 e_rate
  g_med=$(field "$gr" grpc_sync_unary median_us); g_p99=$(field "$gr" grpc_sync_unary p99_us)
  g_rate=$(field "$gr" grpc_callback calls_per_s)
  e_med=$(field "$er" erpc_call median_us); e_p99=$(field "$er" erpc_call p99_us)
  e_rate=$(field "$er" erpc_procs calls_per_s)

  echo
  echo "## $mode (load average at start $load; count=$count warmup=$warmup, throughput ${seconds}s with 64 in flight)"
  printf '| %-38s | %10s | %10s | %6s | %9s |\n' stack "median µs" "p99 µs" "× raw" "calls/s"
  printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' $(seq 40))" "-----------:" "-----------:" "-------:" "----------:"
  row "raw floor (raw_tcp / raw_pipelined)" "$raw_med" "$raw_p99" "$raw_med" "$raw_rate"
  row "rpclb ($rl_label)" "$rl_med" "$rl_p99" "$raw_med" "$rl_rate"
  row "gRPC C++ (sync unary / callback x64)" "$g_med" "$g_p99" "$raw_med" "$g_rate"
  row "Erlang erpc:call (x64 processes)" "$e_med" "$e_p99" "$raw_med" "$e_rate"
  echo "# raw throughput floor: $raw_rate_src"
  [ -n "$rl_rate" ] || echo "# rpclb throughput: n/a: bench/rpc_throughput is not in this tree (no rpclb_throughput payload=9 line)"
  verdict vs_grpc_latency "$(div "$rl_med" "$g_med")" le 0.6
  verdict vs_grpc_throughput "$(div "$rl_rate" "$g_rate")" ge 3.0
  verdict vs_erpc_latency "$(div "$rl_med" "$e_med")" le 0.7
  verdict vs_erpc_throughput "$(div "$rl_rate" "$e_rate")" ge 3.0
}

echo "# bench-peers $(date -u +%Y-%m-%dT%H:%MZ) nproc=$(nproc) commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo ?)"
for m in $modes; do run_mode "$m"; done
