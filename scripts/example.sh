#!/usr/bin/env bash
# The example service: installs the built rpclb into a temporary prefix, builds
# examples/inventory against it with find_package(rpclb), runs three workers and a
# frontend, SIGKILLs one worker while the frontend's calls run, and checks that every call
# came back (served, or with a reported error) and that the others stop cleanly.
# Needs a build (scripts/setup.sh); RPCLB_BUILD_DIR names it (default build/).
# RPCLB_EXAMPLE_PREFIX=DIR builds against the rpclb already installed under DIR instead
# (scripts/package-check.sh: the Debian packages' files), and needs no build;
# RPCLB_EXAMPLE_BUILD=DIR builds the example in DIR and leaves it there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_BUILD_DIR:-$root/build}"
prefix="${RPCLB_EXAMPLE_PREFIX:-}"
if [ -z "$prefix" ]; then
  [ -f "$build/CMakeCache.txt" ] || { echo "example.sh: no build at $build (run scripts/setup.sh)" >&2; exit 1; }
fi

script_name=example.sh
source "$root/scripts/processes.sh"

# The package as a user gets it, at a prefix the build was not configured for.
if [ -z "$prefix" ]; then
  prefix="$work/prefix"
  cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || fail "cmake --install failed"
fi
example="${RPCLB_EXAMPLE_BUILD:-$work/example}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root/examples/inventory" -B "$example" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
    >"$work/configure.log" 2>&1 || fail "configuring examples/inventory failed"
cmake --build "$example" >"$work/example-build.log" 2>&1 || fail "building examples/inventory failed"
# Built against the library under $prefix, and loading that one.
loaded=$(ldd "$example/inventory-worker" | sed -n 's/.*librpclb\.so\.0 => \(\S*\) .*/\1/p')
case "$(realpath -m "$loaded")" in
  "$(realpath -m "$prefix")"/*) ;;
  *) fail "inventory-worker loads ${loaded:-no librpclb}, not the one under $prefix" ;;
esac

export RPCLB_COOKIE="example-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
unset RPCLB_PLUGIN_PATH  # the installed library finds the installed plugins itself

# wait_for FILE PATTERN [SECONDS]: up to SECONDS (10) for a line of FILE to match PATTERN.
wait_for() {
  for _ in $(seq 1 $((${3:-10} * 20))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# start_worker NAME [SEED]: sets $address to its HOST:PORT.
start_worker() {
  "$example/inventory-worker" "$1@127.0.0.1" ${2:+"$2"} >"$work/$1.out" 2>"$work/$1.log" &
  pids+=("$!")
  echo "$!" >"$work/$1.pid"
  wait_for "$work/$1.out" '^listening on ' || fail "worker $1 did not start"
  address=$(sed -n 's/^listening on \(.*\)$/\1/p' "$work/$1.out")
}

start_worker w1; seed="$address"
start_worker w2 "$seed"
start_worker w3 "$seed"
echo "three workers up; w1 at $seed"

"$example/inventory-frontend" "$seed" 3 4000 >"$work/frontend.out" 2>"$work/frontend.log" &
frontend=$!
pids+=("$frontend")
wait_for "$work/frontend.out" '^ready: 3 workers' || fail "the frontend did not see three workers"
wait_for "$work/frontend.out" '^blocking calls done' 120 || fail "the frontend's blocking calls did not end"
kill -9 "$(cat "$work/w3.pid")"
echo "killed w3 while the frontend's calls ran"

status=0
wait "$frontend" || status=$?
summary=$(grep '^{"calls"' "$work/frontend.out" || true)
echo "frontend: $summary"
[ "$status" -eq 0 ] || fail "the frontend exited $status"
python3 - "$summary" <<'PY' || fail "the summary does not add up"
import json, sys
s = json.loads(sys.argv[1])
assert s["calls"] == 4000 and s["ok"] + s["errors"] == s["calls"], s
assert set(s["per_node"]) <= {"w1@127.0.0.1", "w2@127.0.0.1", "w3@127.0.0.1"}, s
assert s["per_node"].get("w1@127.0.0.1", 0) > 0 and s["per_node"].get("w2@127.0.0.1", 0) > 0, s
PY

for w in w1 w2; do
  kill -TERM "$(cat "$work/$w.pid")"
  code=0
  wait "$(cat "$work/$w.pid")" || code=$?
  [ "$code" -eq 0 ] || fail "worker $w exited $code on SIGTERM"
done
echo "example OK"
