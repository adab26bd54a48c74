#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then runs every unit and integration test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"
ctest --test-dir "$build" --output-on-failure --timeout 300
