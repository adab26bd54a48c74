#!/usr/bin/env bash
# Benchmark of the membership mesh with real rpclb-node processes on this machine.
# See --help. The measuring half is bench/mesh_scale_probe.py (python3, stdlib only).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
    cat <<'EOF'
usage: bash bench/mesh_scale.sh --nodes N [--build DIR] [--idle-seconds S] [--extra "ARGS"]
                                [--deadline S] [--out-deadline S] [--settle S]
                                [--verify-admin] [--keep]

Starts N rpclb-node processes on 127.0.0.1 (each --workers 1, one balancer lb=round_robin,
--listen 127.0.0.1:0 so the kernel picks a free port, read back from "listening on"),
node 1 first and nodes 2..N all joining through node 1 as seed; plus a two-node mesh of
its own with the same flags (floor1, and floor2 joining it), whose second node is the
memory floor. Prints one "key value" line per figure
on stdout (progress and warnings go to stderr):

  nodes               N
  load_avg            1-minute load average from /proc/loadavg before anything starts
  converge_s          seconds from the start of the last node until every node sees all
                      N-1 others connected ("not_converged", exit 1, after --deadline)
  idle_us_per_pair_s  CPU time (utime+stime, /proc/PID/stat) of all N nodes over
                      --idle-seconds once converged (after --settle), / seconds /
                      N(N-1)/2 pairs, in microseconds; resolution 1 tick (10 ms) per node
  rss_per_peer_kib    mean over nodes of (VmRSS - VmRSS of the floor node) / (N-2), KiB:
                      the floor has run the same code and holds one peer, so what is
                      left is what the other N-2 peers cost
  anon_per_peer_kib   the same with the anonymous (private, not code) memory of
                      /proc/PID/smaps_rollup
  kill_out_s          SIGKILL node N; seconds until it is out of every other node's view
  stall_out_s         SIGSTOP node N-1; seconds until it is out of every other node's view
                      (then SIGCONT)
and, as context: librpclb_mtime (modification time of the librpclb.so the nodes load),
idle_cpu_pct (all nodes, % of one core), idle_view_changes (view changes
during the idle window: should be 0), rss_node_kib, rss_floor_kib, threads_per_node,
stall_rejoin_s (after SIGCONT, until the resumed node and the N-2 others see each other
again; "not_measured" when the stalled node never left every view). When the mesh does
not converge, instead of the figures after converge_s: one_sided_pairs (A sees B
connected, B does not see A), converged_nodes (nodes that see all N-1 others), view_min and
view_median (peers in a node's view).

"In the view" is read from each node's own log (info level, on stderr): "connected to
NAME" and "lost NAME: ..." lines of the [mesh] channel, replayed per node with the node's
timestamps. No traffic is added to the mesh. --verify-admin also starts an admin listener
on every node and checks, after convergence and at the end, that each node's
rpclb_peers_connected and rpclb_balancer_members gauges (GET /metrics) agree with its
replayed log (the admin listener's own cost is then in the figures).

options:
  --nodes N           number of mesh nodes, 3 … 5000 (required)
  --build DIR         build directory holding bin/rpclb-node and plugins/ (default: the
                      repository's build/)
  --idle-seconds S    idle window for the CPU figure (default 10)
  --extra "ARGS"      extra arguments for every rpclb-node, word-split
  --deadline S        longest wait for convergence, from the last start (default 120)
  --out-deadline S    longest wait for a killed/stalled node to leave every view, and for
                      the resumed one to come back (default 60)
  --settle S          wait between convergence and the idle window (default 2)
  --verify-admin      cross-check the log view with each node's /metrics (see above)
  --keep              keep the run directory (logs) even on success
  -h, --help          this help

The cookie is $RPCLB_COOKIE when set, otherwise a random one for the run. Every node is
stopped and reaped when the script exits, on failure and on Ctrl-C too. Exit status: 0,
1 on not converged / a node not leaving in time / a node that died / a failed check,
2 on a bad command line.
EOF
}

nodes=""
build="$here/../build"
idle=10
extra=""
deadline=120
out_deadline=60
settle=2
verify=0
keep=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --nodes|--build|--idle-seconds|--extra|--deadline|--out-deadline|--settle)
            [[ $# -ge 2 ]] || { echo "mesh_scale: $1 needs a value (see --help)" >&2; exit 2; } ;;
    esac
    case "$1" in
        --nodes) nodes="$2"; shift 2 ;;
        --build) build="$2"; shift 2 ;;
        --idle-seconds) idle="$2"; shift 2 ;;
        --extra) extra="$2"; shift 2 ;;
        --deadline) deadline="$2"; shift 2 ;;
        --out-deadline) out_deadline="$2"; shift 2 ;;
        --settle) settle="$2"; shift 2 ;;
        --verify-admin) verify=1; shift ;;
        --keep) keep=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "mesh_scale: unknown argument \"$1\" (see --help)" >&2; exit 2 ;;
    esac
done
# Decimal, 3 … 5000 (a leading zero would make bash read it as octal).
if ! [[ "$nodes" =~ ^[1-9][0-9]{0,3}$ ]] || (( nodes < 3 || nodes > 5000 )); then
    echo "mesh_scale: --nodes N with 3 <= N <= 5000 is required (see --help)" >&2; exit 2
fi
for v in "$idle" "$deadline" "$out_deadline" "$settle"; do
    [[ "$v" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "mesh_scale: \"$v\" is not a number of seconds" >&2; exit 2; }
done
[[ "$idle" =~ [1-9] ]] || { echo "mesh_scale: --idle-seconds must be more than 0" >&2; exit 2; }

node_bin="$build/bin/rpclb-node"
[[ -x "$node_bin" ]] || { echo "mesh_scale: no executable $node_bin (--build DIR)" >&2; exit 2; }
plugin_dir="$build/plugins"
if [[ ! -e "$plugin_dir/librpclb_round_robin.so" ]]; then
    so=$(find "$build" -name librpclb_round_robin.so -not -path '*/CMakeFiles/*' -print -quit 2>/dev/null || true)
    [[ -n "$so" ]] || { echo "mesh_scale: no librpclb_round_robin.so under $build" >&2; exit 2; }
    plugin_dir=$(dirname "$so")
fi
# More descriptors than the mesh needs: N-1 links, call channels, the listener.
want_fds=$(( nodes * 3 + 256 ))
if (( $(ulimit -n) < want_fds )); then ulimit -n "$want_fds" 2>/dev/null || true; fi

: "${RPCLB_COOKIE:=mesh-scale-$RANDOM$RANDOM$RANDOM}"
export RPCLB_COOKIE

run=$(mktemp -d "${TMPDIR:-/tmp}/mesh_scale.XXXXXX")
pids=()
probe_pid=""
status=1

# Signals a PID only while it is still a child of this shell running rpclb-node: a node
# reaped earlier (the killed victim) may have had its PID reused by an unrelated process.
ours() {
    local pid=$1 stat
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ "$stat" == "$pid (rpclb-node) "* ]] || return 1
    local rest=${stat##*) }
    set -- $rest
    [[ "$2" == "$$" ]]
}

cleanup() {
    local rc=$?
    # A second signal must not end the shell before the nodes are stopped.
    trap - EXIT
    trap '' INT TERM
    local live=()
    # A node started just before the signal may not be in pids yet: every rpclb-node child
    # of this shell is stopped too.
    pids+=($(pgrep -P $$ -x rpclb-node || true))
    [[ -n "$probe_pid" ]] && kill -TERM "$probe_pid" 2>/dev/null || true
    for pid in "${pids[@]}"; do
        if ours "$pid"; then live+=("$pid"); kill -TERM "$pid" 2>/dev/null || true; kill -CONT "$pid" 2>/dev/null || true; fi
    done
    # A graceful stop says bye to every peer; give it 10 s, then SIGKILL what is left.
    local t=0
    while (( t < 100 )); do
        local any=0
        for pid in "${live[@]}"; do
            if ours "$pid" && [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]; then any=1; break; fi
        done
        (( any )) || break
        sleep 0.1; t=$((t + 1))
    done
    for pid in "${live[@]}"; do ours "$pid" && kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if (( keep )) || (( rc != 0 )); then
        echo "mesh_scale: logs kept in $run" >&2
    else
        rm -rf "$run"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

read -r load1 _ < /proc/loadavg

common=(--workers 1 --plugins "$plugin_dir" --balancer lb=round_robin --listen 127.0.0.1:0)
(( verify )) && common+=(--admin 127.0.0.1:0)
# shellcheck disable=SC2206
extra_args=($extra)

start_node() {  # NAME [SEED]: starts it in the background, appends its PID to pids
    local name=$1 seed=${2:-}
    local args=(--name "$name@127.0.0.1" "${common[@]}")
    [[ -n "$seed" ]] && args+=(--seed "$seed")
    "$node_bin" "${args[@]}" "${extra_args[@]}" >"$run/$name.out" 2>"$run/$name.err" &
    pids+=($!)
    last_pid=$!
    # Out of the job table, so that the node the probe SIGKILLs is not reported as
    # "Killed"; the shell still reaps it, and cleanup finds every node by its PID.
    disown "$last_pid"
}

listen_port() {  # NAME PID: waits up to 10 s for "listening on", prints the port
    local name=$1 pid=$2 i port
    for (( i = 0; i < 200; i++ )); do
        # The file may not exist yet: called outside $(...), set -e would end the script.
        port=$(sed -n 's/^listening on [0-9.]*:\([0-9]*\)$/\1/p' "$run/$name.out" 2>/dev/null || true)
        [[ -n "$port" ]] && { echo "$port"; return 0; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "mesh_scale: $name did not start; its stderr:" >&2
    sed 's/^/  /' "$run/$name.err" >&2
    return 1
}

echo "nodes $nodes"
echo "load_avg $load1"
# The build directory may be rebuilt between runs: say which librpclb the nodes load.
lib=$(ldd "$node_bin" 2>/dev/null | awk '/librpclb\.so/ {print $3; exit}')
[[ -n "$lib" && -e "$lib" ]] && echo "librpclb_mtime $(date -u -r "$(readlink -f "$lib")" +%Y-%m-%dT%H:%M:%SZ)"

# The memory floor: a node of a two-node mesh of its own (floor2 joins floor1), so that it
# has run the mesh's code (whose pages its RSS counts) and holds one peer.
start_node floor1
floor1_port=$(listen_port floor1 "$last_pid")
start_node floor2 "127.0.0.1:$floor1_port"
floor_pid=$last_pid
listen_port floor2 "$floor_pid" >/dev/null
start_node n1
seed_pid=$last_pid
seed_port=$(listen_port n1 "$seed_pid")
# The views are read from info-level lines: a quieter log level (--extra, a --config file)
# would hide them. The node logs one when it starts listening.
for (( i = 0; i < 100; i++ )); do
    grep -q " info \[mesh\] n1@127.0.0.1 started listening" "$run/n1.err" 2>/dev/null && break
    sleep 0.05
done
if (( i == 100 )); then
    echo "mesh_scale: node n1 logs no info-level line; the views are read from those (a --log-level or" \
         "log_level above info in --extra?)" >&2
    exit 2
fi
printf '%s %s %s %s\n' "n1@127.0.0.1" "$seed_pid" "$run/n1.err" "$run/n1.out" > "$run/manifest"
echo "mesh_scale: seed n1 on 127.0.0.1:$seed_port, starting $((nodes - 1)) more (logs in $run)" >&2
for (( i = 2; i <= nodes; i++ )); do
    start_node "n$i" "127.0.0.1:$seed_port"
    printf '%s %s %s %s\n' "n$i@127.0.0.1" "$last_pid" "$run/n$i.err" "$run/n$i.out" >> "$run/manifest"
done
t_last=$(date +%s.%N)

probe=(python3 "$here/mesh_scale_probe.py" --manifest "$run/manifest"
       --floor "floor2@127.0.0.1 $floor_pid $run/floor2.err $run/floor2.out" --t-last "$t_last"
       --deadline "$deadline" --out-deadline "$out_deadline" --idle-seconds "$idle" --settle "$settle")
(( verify )) && probe+=(--verify-admin)
# In the background, waited for: the shell runs its INT and TERM traps during a `wait`,
# where a foreground command would hold them until it ends.
"${probe[@]}" &
probe_pid=$!
if wait "$probe_pid"; then status=0; else status=$?; fi
(( status == 130 )) && exit 130
(( status == 0 )) || exit 1
exit 0
