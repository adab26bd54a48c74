#!/usr/bin/env bash
# The demo: sets up and builds rpclb, then runs a three-node cluster on 127.0.0.1,
# load-balances calls through a round_robin and a random balancer, kills one node with
# SIGKILL in the middle of a run, restarts another with SIGTERM in the middle of a run
# without losing a call, and stops the others with SIGTERM.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"

bin="$build/bin"
export RPCLB_PLUGIN_PATH="$build/plugins"
export RPCLB_COOKIE="demo-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
script_name=demo.sh
source "$root/scripts/processes.sh"

# start_node NAME [SEED]: starts a node in the background (logs in $work/NAME.log) and
# sets $port to its listening port. Not run in a subshell, so that this script owns the
# node processes (the clean-up trap and `wait` need them as children).
start_node() {
  local name="$1" seed="${2:-}" args=()
  [ -n "$seed" ] && args+=(--seed "$seed")
  "$bin/rpclb-node" --name "$name@127.0.0.1" --listen 127.0.0.1:0 "${args[@]}" \
      --balancer workers=round_robin --balancer shuffle=random \
      >"$work/$name.out" 2>"$work/$name.log" &
  local pid=$!
  pids+=("$pid")
  echo "$pid" >"$work/$name.pid"
  for _ in $(seq 1 200); do
    if grep -q '^listening on ' "$work/$name.out" 2>/dev/null; then
      port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/$name.out"); return 0
    fi
    sleep 0.05
  done
  echo "demo: node $name did not start; its log:" >&2; cat "$work/$name.log" >&2; exit 1
}

call() { "$bin/rpclb-call" --seed "127.0.0.1:$port_a" "$@" || true; }

echo "== starting three nodes (alpha is the seed of beta and gamma)"
start_node alpha; port_a=$port
start_node beta "127.0.0.1:$port_a"; port_b=$port
start_node gamma "127.0.0.1:$port_a"; port_c=$port
echo "alpha 127.0.0.1:$port_a   beta 127.0.0.1:$port_b   gamma 127.0.0.1:$port_c"

echo
echo "== 3000 calls of demo.node through balancer 'workers' (round_robin), 4 in flight"
call --balancer workers --count 3000 --concurrency 4 demo node
echo
echo "== 3000 calls of demo.node through balancer 'shuffle' (random), 4 in flight"
call --balancer shuffle --count 3000 --concurrency 4 demo node

echo
echo "== 2000 calls of demo.sleep [2] through 'workers' (timeout 2000 ms); gamma is killed with SIGKILL after 1 s"
call --balancer workers --count 2000 --concurrency 4 --timeout 2000 demo sleep '[2]' >"$work/run.json" 2>"$work/run.err" &
run=$!
sleep 1  # the scenario: the kill lands a second into the run
gamma_pid=$(cat "$work/gamma.pid")
disown "$gamma_pid"  # no "Killed" job notice from bash; the kernel reaps it via init
kill -9 "$gamma_pid"
echo "(gamma killed with SIGKILL)"
wait $run || true
cat "$work/run.json"
sed -n 's/^rpclb-call: first error: /first error: /p' "$work/run.err"
echo "(calls in flight on gamma when it died fail at once with service_unavailable; none waits for its timeout: see latency_us.max)"

echo
echo "== after the kill: 1000 calls through 'workers' land on the two survivors"
call --balancer workers --count 1000 --concurrency 4 demo node

echo
echo "== 3000 calls of demo.sleep [2] through 'workers'; beta is stopped with SIGTERM after 1 s and started again"
call --balancer workers --count 3000 --concurrency 4 demo sleep '[2]' >"$work/rolling.json" 2>"$work/rolling.err" &
run=$!
sleep 1  # the scenario: the stop lands a second into the run
beta_pid=$(cat "$work/beta.pid")
kill -TERM "$beta_pid"
status=0; wait "$beta_pid" || status=$?
echo "(beta left, drained, said bye and exited with status $status; starting it again)"
start_node beta "127.0.0.1:$port_a"
wait $run || true
cat "$work/rolling.json"
echo "(a graceful stop loses no call: errors stays 0, the calls move to alpha and back to beta)"

echo
echo "== stopping alpha and beta with SIGTERM"
for n in alpha beta; do
  pid=$(cat "$work/$n.pid"); kill -TERM "$pid"
  status=0; wait "$pid" || status=$?
  echo "$n exited with status $status"
done
