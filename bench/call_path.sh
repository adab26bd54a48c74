#!/usr/bin/env bash
# Counts the functions and files of rpclb that one blocking call through a balancer crosses,
# caller and serving node together: runs build/bench/call_path under
# `valgrind --tool=callgrind`, and counts the functions whose code is in src/,
# include/rpclb/ or plugins/ that ran between the entry of call_in_window() and that of
# window_closed() (their own instructions, inlined code by the file it came from). Two
# calls are made in the window, so that the first one's tail on the serving node is
# always in it; the window starts at a random moment and the tool runs three times and
# keeps what every window ran, so that a timer that fired in one window is not counted.
# (Callgrind's --dump-before at both ends: a --zero-before leaves in the window the
# threads that slept through it.)
#
#   bash bench/call_path.sh [--list] [call_path's flags: --inline, --no-call-channels]
#
# Prints `functions N files M`; --list prints them too. Needs valgrind (Debian's).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RPCLB_BUILD_DIR:-$root/build}/bench/call_path"
list=0
args=(--calls 2)
for a in "$@"; do
  if [ "$a" = --list ]; then list=1; else args+=("$a"); fi
done
command -v valgrind >/dev/null || { echo "call_path.sh: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
[ -x "$bin" ] || { echo "call_path.sh: build $bin first (ninja -C build bench_call_path)" >&2; exit 2; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for run in 1 2 3; do
  valgrind --tool=callgrind --callgrind-out-file="$out/run$run.%p" \
    --dump-before='*call_in_window*' --dump-before='*window_closed*' \
    "$bin" "${args[@]}" >"$out/run$run.log" 2>&1 || { cat "$out/run$run.log" >&2; exit 1; }
done
python3 - "$out" "$list" <<'EOF'
import glob, re, sys

out, show = sys.argv[1], sys.argv[2] == "1"
ours = re.compile(r'(^|/)(src|include/rpclb|plugins)/')
spec = re.compile(r'^(fl|fi|fe|fn|cfl|cfi|cfn|ob|cob)=(?:\((\d+)\))?\s*(.*)$')

def window(path):
    """Functions (name, file) and files of ours with instructions of their own in a dump."""
    tables = {"file": {}, "fn": {}, "ob": {}}
    kind = {"fl": "file", "fi": "file", "fe": "file", "cfl": "file", "cfi": "file",
            "fn": "fn", "cfn": "fn", "ob": "ob", "cob": "ob"}
    fl = fn = here = None
    skip = False
    functions, files = set(), set()
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = spec.match(line)
        if m:
            key, ident, name = m.groups()
            table = tables[kind[key]]
            if ident and name: table[ident] = name
            elif ident: name = table.get(ident, "?")
            if key == "fl": fl = here = name
            elif key in ("fi", "fe"): here = name
            elif key == "fn": fn, here = name, fl
            continue
        if line.startswith("calls="):
            skip = True  # the next cost line is the callee's, inclusive
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            if skip:
                skip = False
                continue
            costs = line.split()[1:]
            if fn and any(c != "0" for c in costs):
                if here and ours.search(here): files.add(re.sub(r'^.*?((src|include/rpclb|plugins)/)', r'\1', here))
                if fl and ours.search(fl): functions.add(fn)
    return functions, files

dumps = []
for run in ("run1", "run2", "run3"):
    found = [p for p in glob.glob(f"{out}/{run}.*") if not p.endswith(".log") and p.endswith(".2")]
    if not found: sys.exit(f"call_path.sh: no window dump in {out} for {run}")
    dumps.append(window(found[0]))
functions = dumps[0][0] & dumps[1][0] & dumps[2][0]
files = dumps[0][1] & dumps[1][1] & dumps[2][1]
print(f"functions {len(functions)} files {len(files)}")
if show:
    for f in sorted(files): print("file", f)
    for f in sorted(functions): print("function", f)
EOF
