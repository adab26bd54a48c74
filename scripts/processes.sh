# Sourced by the scripts that start processes: a scratch folder ($work); the processes to
# reap ($pids); a trap that kills and reaps them and removes $work on exit; and
# fail MESSAGE, which prints MESSAGE and the end of every log in $work, then exits 1.
# The sourcing script sets $script_name (for fail's messages) first.
work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "$script_name: $*" >&2
  for f in "$work"/*.log "$work"/*.out; do [ -f "$f" ] && { echo "---- $f" >&2; tail -n 30 "$f" >&2; }; done
  exit 1
}
