#!/usr/bin/env bash
# The Debian packages as an operator and an application author get them: builds them with
# `cpack -G DEB` in the build, extracts each into a temporary root (dpkg-deb -x; nothing is
# installed on the system), checks what each holds and depends on, that the tools run and
# that find_package(rpclb) needs no tools package, then builds examples/inventory against
# that root with find_package(rpclb) and runs it (scripts/example.sh), has the root's
# rpclb-call reserve stock from one of its workers, and checks that a worker whose library
# finds no plugins beside it refuses to start. Fails at the first step that fails; the root
# is removed at the end. Needs a build (scripts/setup.sh); RPCLB_BUILD_DIR names it
# (default build/).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_BUILD_DIR:-$src/build}"
[ -f "$build/CMakeCache.txt" ] || { echo "package-check.sh: no build at $build (run scripts/setup.sh)" >&2; exit 1; }
command -v dpkg-deb >/dev/null || { echo "package-check.sh: dpkg-deb not found" >&2; exit 1; }

script_name=package-check.sh
source "$src/scripts/processes.sh"

# ---- build the packages ---------------------------------------------------------------
(cd "$build" && cpack -G DEB -B "$work/debs") >"$work/cpack.log" 2>&1 || fail "cpack -G DEB failed"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
[ -n "$version" ] || fail "no CMAKE_PROJECT_VERSION in $build/CMakeCache.txt"
debs=()
for name in librpclb0 librpclb-dev rpclb-tools; do
  deb=("$work/debs/${name}_${version}"-*.deb)
  [ -f "${deb[0]}" ] || fail "cpack made no $name package"
  debs+=("${deb[0]}")
done
[ "$(ls "$work"/debs/*.deb | wc -l)" -eq 3 ] || fail "cpack made other packages than the three: $(ls "$work"/debs/*.deb)"

# Each package depends on what it needs: the library on Boost's shared libraries and
# OpenSSL (dpkg-shlibdeps), the others on exactly this librpclb0.
depends() { dpkg-deb -f "$1" Depends; }
for need in libboost-json1.81.0 libboost-log1.81.0 libssl3; do
  depends "${debs[0]}" | grep -q "$need" || fail "librpclb0 does not depend on $need: $(depends "${debs[0]}")"
done
for deb in "${debs[1]}" "${debs[2]}"; do
  depends "$deb" | grep -qF "librpclb0 (= $version-" || fail "$(basename "$deb") does not depend on this librpclb0: $(depends "$deb")"
done
depends "${debs[1]}" | grep -q "libboost-json1.81-dev" || fail "librpclb-dev does not depend on libboost-json1.81-dev"

# ---- extract them into a root ---------------------------------------------------------
root="$work/root"
for deb in "${debs[@]}"; do
  dpkg-deb -x "$deb" "$root" || fail "dpkg-deb -x $deb failed"
  echo "$(basename "$deb"): $(dpkg-deb -c "$deb" | grep -vc '/$') files, $(du -k "$deb" | cut -f1) KiB"
done
prefix="$root/usr"
config=$(find "$prefix" -name rpclbConfig.cmake -path '*/cmake/rpclb/*' | head -n 1)
[ -n "$config" ] || fail "no rpclbConfig.cmake under $prefix"
libdir="$(dirname "$(dirname "$(dirname "$config")")")"
for f in "$libdir/librpclb.so.0" "$libdir/librpclb.so" "$libdir/rpclb/plugins/librpclb_hash_ring.so" \
         "$prefix/include/rpclb/cluster.hpp" "$prefix/bin/rpclb-node" "$prefix/bin/rpclb-call" "$prefix/bin/rpclb-admin"; do
  [ -e "$f" ] || fail "the packages hold no ${f#"$root"}"
done
# The tools run from the root, with the root's library.
for tool in rpclb-node rpclb-call rpclb-admin; do
  loaded=$(ldd "$prefix/bin/$tool" | sed -n 's/.*librpclb\.so\.0 => \(\S*\) .*/\1/p')
  [ "$(realpath -m "$loaded")" = "$(realpath -m "$libdir/librpclb.so.0")" ] \
    || fail "$tool loads ${loaded:-no librpclb}, not $libdir/librpclb.so.0"
  "$prefix/bin/$tool" --help >"$work/$tool.out" 2>&1 || fail "$tool --help failed"
done

# An application author's machine may have the library and its development files
# without the tools: find_package(rpclb) works there too.
for deb in "${debs[0]}" "${debs[1]}"; do dpkg-deb -x "$deb" "$work/devroot" || fail "dpkg-deb -x $deb failed"; done
cmake -S "$src/examples/inventory" -B "$work/devcheck" -DCMAKE_PREFIX_PATH="$work/devroot/usr" \
    >"$work/devcheck.log" 2>&1 || fail "find_package(rpclb) fails with librpclb0 and librpclb-dev alone"

# ---- build and run the example against the root ---------------------------------------
example="$work/example"
RPCLB_EXAMPLE_PREFIX="$prefix" RPCLB_EXAMPLE_BUILD="$example" bash "$src/scripts/example.sh" \
  || fail "scripts/example.sh against the packages failed"

export RPCLB_COOKIE="package-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
unset RPCLB_PLUGIN_PATH
wait_for() {  # FILE PATTERN [SECONDS]
  for _ in $(seq 1 $((${3:-10} * 20))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# One worker, and the root's rpclb-call reserving through its balancer.
"$example/inventory-worker" w1@127.0.0.1 >"$work/worker.out" 2>"$work/worker.log" &
worker=$!
pids+=("$worker")
wait_for "$work/worker.out" '^listening on ' || fail "the worker did not start"
address=$(sed -n 's/^listening on \(.*\)$/\1/p' "$work/worker.out")
"$prefix/bin/rpclb-call" --seed "$address" --balancer inventory --key sku-7 --count 3 \
    inventory reserve '["sku-7", 5]' >"$work/call.out" 2>"$work/call.log" \
  || fail "rpclb-call from the packages failed"
grep -q '"ok":3' "$work/call.out" || fail "rpclb-call's three calls did not all succeed: $(cat "$work/call.out")"
kill -TERM "$worker"
code=0
wait "$worker" || code=$?
[ "$code" -eq 0 ] || fail "the worker exited $code on SIGTERM"
echo "rpclb-call from the packages: $(cat "$work/call.out")"

# The plugins the worker loaded were the root's: without them it must not start. (Unless
# the plugin directory compiled into librpclb exists on this machine, which it searches
# last.)
builtin=$(sed -n 's/^set(rpclb_BUILTIN_PLUGIN_DIR "\(.*\)")$/\1/p' "$config")
if [ -n "$builtin" ] && [ -e "$builtin/librpclb_hash_ring.so" ]; then
  echo "package-check.sh: left out the check without plugins: $builtin has its own librpclb_hash_ring.so"
else
  mv "$libdir/rpclb/plugins" "$libdir/rpclb/plugins.away"
  code=0
  timeout 60 "$example/inventory-worker" w2@127.0.0.1 >"$work/bare.out" 2>"$work/bare.log" || code=$?
  [ "$code" -eq 1 ] || fail "a worker without the packaged plugins exited $code, not 1"
  grep -q 'hash_ring' "$work/bare.log" || fail "a worker without the packaged plugins did not name hash_ring"
  echo "without the packaged plugins the worker refuses: $(grep -m1 hash_ring "$work/bare.log")"
fi
echo "package-check OK"
