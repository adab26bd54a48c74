#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then runs every test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_BUILD_DIR:-$root/build}"
# .ci/run has run setup.sh already and says so with RPCLB_SETUP_DONE=1.
[ -n "${RPCLB_SETUP_DONE:-}" ] || bash "$root/scripts/setup.sh"
# Tests run two at a time (or one per core); those whose bounds are about time say
# RUN_SERIAL (test/CMakeLists.txt) and run alone.
ctest --test-dir "$build" --output-on-failure --timeout 300 -j "$(nproc)"
