#!/usr/bin/env bash
# Chaos soak: five rpclb-node processes on 127.0.0.1 under steady calls through two
# balancers (rr=round_robin, h=hash_ring with random keys), and every few seconds one
# fault on a random node: kill -9 (then a restart), SIGSTOP for 1-6 s then SIGCONT, or
# SIGTERM (a graceful stop) and a restart under the same name. At the end it prints
#
#   calls, ok, errors_by_code   what the load generator (rpclb-fault-client load) saw
#   hung                        calls that outlived their deadline by more than 1 s
#   lost_on_sigterm             calls that failed on a node while it stopped on SIGTERM
#   peak_rss_kib                the largest VmHWM of each node name over its runs
#   converged yes|no            every node's view of every group the same, all 5 in each
#
# and exits 1 if hung > 0, lost_on_sigterm > 0 or not converged (2 on a setup failure).
# Bounded: SECONDS of load, at most SECONDS/2 faults, every wait has a deadline, and every
# process it started is killed on any exit.
#
# Usage: bash scripts/chaos.sh [SECONDS]      (default 300)
# Environment: RPCLB_BUILD_DIR (default build/), RPCLB_BIN_DIR, RPCLB_PLUGIN_PATH,
#              RPCLB_CHAOS_KEEP=1 keeps the work directory (logs) even when it passes.
set -uo pipefail
secs="${1:-300}"
[[ "$secs" =~ ^[0-9]+$ && "$secs" -ge 10 ]] || { echo "chaos: SECONDS must be a number >= 10" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_BUILD_DIR:-$root/build}"
bin="${RPCLB_BIN_DIR:-$build/bin}"
plugins="${RPCLB_PLUGIN_PATH:-$build/plugins}"
plugins="${plugins%%:*}"
for tool in rpclb-node rpclb-admin rpclb-fault-client; do
  [ -x "$bin/$tool" ] || { echo "chaos: $bin/$tool is missing (build it first)" >&2; exit 2; }
done
work="$(mktemp -d "${TMPDIR:-/tmp}/rpclb-chaos-XXXXXX")"
export RPCLB_COOKIE="chaos-$$-$RANDOM"
nodes=5
# A node whose parent (this script) dies is killed too, where util-linux setpriv exists.
launcher=()
command -v setpriv >/dev/null && launcher=(setpriv --pdeathsig KILL --)

declare -A pid port admin rss
load_pid=""
now_ms() { date +%s%3N; }

cleanup() {
  local status=$?
  for i in $(seq 1 $nodes); do
    [ -n "${pid[$i]:-}" ] && { kill -CONT "${pid[$i]}" 2>/dev/null; kill -KILL "${pid[$i]}" 2>/dev/null; }
  done
  [ -n "$load_pid" ] && kill -KILL "$load_pid" 2>/dev/null
  wait 2>/dev/null
  if [ "$status" -eq 0 ] && [ -z "${RPCLB_CHAOS_KEEP:-}" ]; then rm -rf "$work"; else echo "chaos: logs in $work"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 2' INT TERM

# The largest resident set node $1 had so far (VmHWM, KiB), kept across its restarts.
note_rss() {
  local i=$1 hwm
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/${pid[$i]}/status" 2>/dev/null)
  [ -n "$hwm" ] && [ "$hwm" -gt "${rss[$i]:-0}" ] && rss[$i]=$hwm
  return 0
}

# start_node I [SEED...]: starts c<I>@127.0.0.1 on its old port (any port the first time)
# and waits up to 10 s for its `listening on` line.
start_node() {
  local i=$1; shift
  local seeds=() s
  for s in "$@"; do seeds+=(--seed "$s"); done
  local out="$work/c$i.out"
  for listen in "127.0.0.1:${port[$i]:-0}" "127.0.0.1:0"; do
    : >"$out"
    "${launcher[@]}" "$bin/rpclb-node" --name "c$i@127.0.0.1" --listen "$listen" --plugins "$plugins" \
      --admin 127.0.0.1:0 --balancer rr=round_robin --balancer h=hash_ring "${seeds[@]}" \
      >"$out" 2>>"$work/c$i.log" &
    pid[$i]=$!
    for _ in $(seq 1 200); do
      grep -q '^listening on ' "$out" && break
      kill -0 "${pid[$i]}" 2>/dev/null || break
      sleep 0.05
    done
    if grep -q '^listening on ' "$out"; then
      port[$i]=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out")
      admin[$i]=$(sed -n 's/^admin on //p' "$out")
      return 0
    fi
    kill -KILL "${pid[$i]}" 2>/dev/null; wait "${pid[$i]}" 2>/dev/null
    echo "chaos: c$i did not start on $listen; its log:" >&2; tail -5 "$work/c$i.log" >&2
  done
  return 1
}

# The seeds of a (re)starting node: every other node's address.
seeds_except() {
  local i j out=()
  for j in $(seq 1 $nodes); do [ "$j" != "$1" ] && [ -n "${port[$j]:-}" ] && out+=("127.0.0.1:${port[$j]}"); done
  echo "${out[@]}"
}

# One node's view of the groups, as one line of JSON.
view() { "$bin/rpclb-admin" --admin "${admin[$1]}" --timeout 2000 --json groups 2>/dev/null | tr -d ' \n'; }

converged() {
  local first="" v i
  for i in $(seq 1 $nodes); do
    v=$(view "$i") || return 1
    for g in rr h; do
      [ "$(echo "$v" | grep -o "{\"group\":\"$g\",\"members\":\[[^]]*\]" | grep -o '@127' | wc -l)" -eq $nodes ] || return 1
    done
    [ -z "$first" ] && first=$v
    [ "$v" = "$first" ] || return 1
  done
}

start_node 1 || exit 2
for i in $(seq 2 $nodes); do start_node "$i" "127.0.0.1:${port[1]}" || exit 2; done
for _ in $(seq 1 100); do converged && break; sleep 0.1; done
converged || { echo "chaos: the five nodes did not form a mesh within 10 s" >&2; exit 2; }

"$bin/rpclb-fault-client" load --seed "127.0.0.1:${port[1]}" --seed "127.0.0.1:${port[2]}" \
  --balancer rr --balancer h --seconds "$secs" --rate 200 --timeout 2000 --expect-nodes $nodes \
  --plugins "$plugins" --errors "$work/errors.txt" >"$work/load.json" 2>"$work/load.log" &
load_pid=$!

end=$(( $(date +%s) + secs ))
max_faults=$(( secs / 2 ))
faults=0 kill9=0 stops=0 terms=0 term_overruns=0
: >"$work/sigterm-windows.txt"
while [ "$(date +%s)" -lt "$end" ] && [ "$faults" -lt "$max_faults" ]; do
  sleep "$(( 2 + RANDOM % 3 ))"  # the soak's pace: a fault every 2 to 4 s
  [ "$(date +%s)" -lt "$(( end - 2 ))" ] || break
  i=$(( 1 + RANDOM % nodes ))
  faults=$(( faults + 1 ))
  case $(( RANDOM % 3 )) in
    0)
      kill9=$(( kill9 + 1 )); note_rss "$i"
      echo "$(now_ms) kill-9 c$i" >>"$work/faults.txt"
      kill -KILL "${pid[$i]}"; wait "${pid[$i]}" 2>/dev/null
      sleep 1  # down for a second before the restart
      start_node "$i" $(seeds_except "$i") || exit 2
      ;;
    1)
      stops=$(( stops + 1 )); hold=$(( 1 + RANDOM % 6 ))
      echo "$(now_ms) sigstop-${hold}s c$i" >>"$work/faults.txt"
      kill -STOP "${pid[$i]}"; sleep "$hold"; kill -CONT "${pid[$i]}"
      ;;
    2)
      terms=$(( terms + 1 )); note_rss "$i"
      t0=$(now_ms)
      echo "$t0 sigterm c$i" >>"$work/faults.txt"
      kill -TERM "${pid[$i]}"
      # rpclb-node drains (balancer drain_timeout 15 s) and exits; give it 25 s.
      for _ in $(seq 1 250); do kill -0 "${pid[$i]}" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "${pid[$i]}" 2>/dev/null; then
        term_overruns=$(( term_overruns + 1 )); kill -KILL "${pid[$i]}"
      fi
      wait "${pid[$i]}" 2>/dev/null
      start_node "$i" $(seeds_except "$i") || exit 2
      # A call lost to the stop fails on this node between the signal and shortly after
      # the new run is up.
      echo "c$i@127.0.0.1 $t0 $(( $(now_ms) + 2000 ))" >>"$work/sigterm-windows.txt"
      ;;
  esac
done

# The load ends by itself after SECONDS (plus its deadline and 1 s for stragglers).
for _ in $(seq 1 $(( (secs + 30) * 10 ))); do kill -0 "$load_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$load_pid" 2>/dev/null && { echo "chaos: the load generator did not finish" >&2; kill -KILL "$load_pid"; }
wait "$load_pid"; load_status=$?; load_pid=""
summary=$(head -n 1 "$work/load.json")
[ -n "$summary" ] || { echo "chaos: the load generator printed no summary; its log:" >&2; tail -5 "$work/load.log" >&2; exit 2; }

converged_after=""
t0=$(now_ms)
for _ in $(seq 1 150); do
  if converged; then converged_after=$(( $(now_ms) - t0 )); break; fi
  sleep 0.1
done
for i in $(seq 1 $nodes); do note_rss "$i"; done

touch "$work/errors.txt"
lost=$(awk 'NR == FNR { node[NR] = $1; from[NR] = $2; to[NR] = $3; n = NR; next }
            { for (w = 1; w <= n; ++w) if ($2 == node[w] && $1 >= from[w] && $1 <= to[w]) { ++lost; break } }
            END { print lost + 0 }' "$work/sigterm-windows.txt" "$work/errors.txt")
field() { echo "$summary" | grep -o "\"$1\":[^,}]*" | cut -d: -f2; }
hung=$(field hung)

echo "seconds $secs"
echo "faults $faults (kill-9 $kill9, sigstop $stops, sigterm $terms, sigterm overran 25 s: $term_overruns)"
echo "calls $(field calls)"
echo "ok $(field ok)"
echo "errors_by_code $(echo "$summary" | grep -o '"errors_by_code":{[^}]*}' | cut -d: -f2-)"
echo "hung $hung"
echo "max_late_ms $(field max_late_ms)"
echo "lost_on_sigterm $lost"
printf 'peak_rss_kib'; for i in $(seq 1 $nodes); do printf ' c%s=%s' "$i" "${rss[$i]:-?}"; done; echo
if [ -n "$converged_after" ]; then echo "converged yes (after ${converged_after} ms)"; else echo "converged no"; fi

[ "$hung" = "0" ] && [ "$lost" = "0" ] && [ -n "$converged_after" ] && [ "$load_status" -eq 0 ] && exit 0
if [ "$lost" != "0" ]; then echo "chaos: calls lost on SIGTERM:"; awk '{print}' "$work/sigterm-windows.txt"; fi
exit 1
