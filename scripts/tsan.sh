#!/usr/bin/env bash
# Builds the library, the algorithm plugins and their unit tests with ThreadSanitizer and
# runs the algorithm tests (concurrent picks while membership changes). Needs the packages
# scripts/setup.sh installs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_TSAN_BUILD_DIR:-$root/build-tsan}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRPCLB_BUILD_BENCH=OFF \
      -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
      -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
targets=(rpclb)
for dir in "$root"/plugins/*/; do targets+=("rpclb_$(basename "$dir")"); done
for src in "$root"/test/unit/algorithms*.cpp; do targets+=("unit_$(basename "$src" .cpp)"); done
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir "$build" --output-on-failure -R '^unit\.algorithms'
