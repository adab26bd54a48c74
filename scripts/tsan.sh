#!/usr/bin/env bash
# Builds the library, the plugins and the concurrency-heavy unit and cluster tests with
# ThreadSanitizer and runs them: the algorithm tests (concurrent picks while membership
# changes), the supervisor and balancer supervision, the telemetry bus and metrics, and
# routing between in-process nodes (retry timers, draining, async completions), group
# membership delivered from several threads, and the
# cache of large decoded values (blocks freed on other threads), and the mesh with its
# failure detector (probes answered on the links' strands, one timer), hedged calls (attempts
# ending on several threads) and deadlines read in handlers. Needs the
# packages scripts/setup.sh installs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_TSAN_BUILD_DIR:-$root/build-tsan}"
# -O1 -g1: the sanitizers' usual optimisation level, with line tables for the reports;
# both compile faster than the normal build's -O2 -g, and -O3 is left off
# (RPCLB_VECTORIZE_MASKING).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRPCLB_BUILD_BENCH=OFF \
      -DRPCLB_VECTORIZE_MASKING=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
      -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
      -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
targets=(rpclb)
for dir in "$root"/plugins/*/; do targets+=("rpclb_$(basename "$dir")"); done
tests=(algorithms supervisor balancer_supervision telemetry metrics routing groups async_completion callbacks_without_locks
       write_queue inline_handlers batching call_channels block_cache mesh failure_detector outlier_detection
       hedging deadlines)
for t in "${tests[@]}"; do
  for src in "$root"/test/{unit,cluster}/"$t"*.cpp; do
    [ -e "$src" ] || continue
    kind=$(basename "$(dirname "$src")")
    targets+=("${kind}_$(basename "$src" .cpp)")
  done
done
test_plugins=()
for src in "$root"/test/plugins/*.cpp; do test_plugins+=("rpclb_$(basename "$src" .cpp)"); done
targets+=("${test_plugins[@]}")
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/scripts/tsan.supp" \
  ctest --test-dir "$build" --output-on-failure -R "^(unit|cluster)\.($(IFS='|'; echo "${tests[*]}"))"
