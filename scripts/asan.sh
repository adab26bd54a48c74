#!/usr/bin/env bash
# Builds the whole suite (library, plugins, tools, unit, cluster and integration tests; no
# benchmarks) with AddressSanitizer and UndefinedBehaviorSanitizer into build-asan/ and
# runs the tests with ctest. The rpclb-node and rpclb-call processes the integration tests
# start come from the same build, so they run under the sanitizers too. Any sanitizer
# report fails the test that produced it (undefined behaviour is not recovered from).
#
# Usage: bash scripts/asan.sh [CTEST_REGEX]
#   With no argument everything is built and every test runs. With a ctest regex only the
#   matching tests run, and only what they need is built. RPCLB_ASAN_TESTS=REGEX does the
#   same as the argument (.ci/run uses it to run a subset); RPCLB_ASAN_BUILD_DIR overrides
#   build-asan/.
# Needs the packages scripts/setup.sh installs. Compiles through ccache when it is installed (CMakeLists.txt).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_ASAN_BUILD_DIR:-$root/build-asan}"
regex="${1:-${RPCLB_ASAN_TESTS:-}}"
# clang-14 (scripts/install-clang.sh): it compiles this build in about 60 % of GCC's time.
# Its -fsanitize=function is left out: on some Boost.Test sources clang-14 then emits
# what its assembler refuses ("Cannot represent a difference across sections").
bash "$root/scripts/install-clang.sh"
flags="-fsanitize=address,undefined -fno-sanitize=function -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -O1 -g1: the sanitizers' usual optimisation level, with line tables for the reports;
# both compile faster than the normal build's -O2 -g, and -O3 is left off
# (RPCLB_VECTORIZE_MASKING).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRPCLB_BUILD_BENCH=OFF \
      -DCMAKE_CXX_COMPILER=/usr/bin/clang++-14 -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
      -DRPCLB_VECTORIZE_MASKING=OFF \
      -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
      -DCMAKE_MODULE_LINKER_FLAGS="$flags" >/dev/null
if [ -z "$regex" ]; then
  cmake --build "$build" -j "$(nproc)"
else
  # Only what the chosen tests need: the library, the plugins and test plugins, the tools,
  # and the executables of the matching tests (ctest name kind.name -> target kind_name).
  targets=(rpclb rpclb-node rpclb-call)
  for dir in "$root"/plugins/*/; do targets+=("rpclb_$(basename "$dir")"); done
  for src in "$root"/test/plugins/*.cpp; do targets+=("rpclb_$(basename "$src" .cpp)"); done
  while read -r name; do targets+=("${name/./_}"); done < <(
    ctest --test-dir "$build" -N -R "$regex" | sed -n 's/^ *Test *#[0-9]*: *//p')
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
fi
# A leak found at exit fails the process, as does any ASan or UBSan report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
args=(--test-dir "$build" --output-on-failure --timeout 600)
if [ -n "$regex" ]; then args+=(-R "$regex"); fi
log="$build/ctest-asan.log"
if ctest "${args[@]}" 2>&1 | tee "$log"; then exit 0; fi
# LeakSanitizer's own tracer can crash at exit ("Tracer caught signal 11", "LeakSanitizer
# has encountered a fatal error") when a thread ends while it stops them: a fault of the
# tool, not a finding. Only then are the failed tests run once more; any report of a
# sanitizer, a failed check or a timeout stands.
if grep -q "LeakSanitizer has encountered a fatal error" "$log" &&
   ! grep -qE "ERROR: (AddressSanitizer|LeakSanitizer: detected)|runtime error:|error: in \"|\*\*\*Timeout|\*\*\*Exception" "$log"; then
  echo "asan.sh: LeakSanitizer's tracer crashed at exit; running the failed tests once more" >&2
  ctest --test-dir "$build" --output-on-failure --timeout 600 --rerun-failed
else
  exit 1
fi
