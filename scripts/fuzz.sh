#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (the wire decoder, the cookie handshake state
# machine, the config-file parser, the admin protocol's requests) with clang-14 and
# -fsanitize=fuzzer,address,undefined into build-fuzz/, then runs each for SECONDS
# (default 600), as many at once as there are cores, each starting from a copy of its checked-in seed corpus
# fuzz/corpus/<target>/. A crash stops the script with
# the failing input saved as build-fuzz/artifacts/<target>/crash-*; turn it into a
# regression test in test/unit/ before fixing it.
#
# Usage: bash scripts/fuzz.sh [SECONDS]
#   RPCLB_FUZZ_BUILD_DIR overrides build-fuzz/. Needs the packages of setup.sh; installs
#   clang-14 and libclang-rt-14-dev (the libFuzzer runtime) when they are missing
#   (scripts/install-clang.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${1:-600}"
case "$seconds" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got \"$seconds\"" >&2; exit 2;; esac
# clang-14 and its runtimes (libclang-rt-14-dev holds libFuzzer's), installed when missing.
bash "$root/scripts/install-clang.sh"
cxx=/usr/bin/clang++-14
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
      -DRPCLB_BUILD_TESTS=OFF -DRPCLB_BUILD_BENCH=OFF -DRPCLB_BUILD_FUZZ=ON \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
targets=(wire handshake config admin)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# The targets run side by side, one per core, each for SECONDS.
run_one() {
  local t=$1 corpus="$build/corpus/$1" artifacts="$build/artifacts/$1"
  mkdir -p "$corpus" "$artifacts"
  cp -n "$root/fuzz/corpus/$t"/* "$corpus/" 2>/dev/null || true
  echo "fuzz.sh: fuzz_$t for ${seconds} s"
  # The run's last lines carry libFuzzer's totals ("Done N runs in S second(s)").
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" 2>"$build/fuzz_$t.log" \
    || { tail -n 60 "$build/fuzz_$t.log" >&2; echo "fuzz.sh: fuzz_$t failed; input saved in $artifacts/" >&2; return 1; }
  grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added)" "$build/fuzz_$t.log" |
    sed "s/^/fuzz_$t: /"
}
failed=0 batch=()
for t in "${targets[@]}" ""; do
  if [ -n "$t" ]; then run_one "$t" & batch+=($!); fi
  if [ ${#batch[@]} -ge "$(nproc)" ] || { [ -z "$t" ] && [ ${#batch[@]} -gt 0 ]; }; then
    for pid in "${batch[@]}"; do wait "$pid" || failed=1; done
    batch=()
  fi
done
exit "$failed"
