#!/usr/bin/env bash
# Checks that the b2 build (Jamroot) still builds: builds the library, the plugins, the
# test plugins and the tools into the staged layout (bin/stage/), then builds and runs one
# test, cluster_algorithms, which loads the staged round_robin and random plugins.
# Compiles through ccache (project-config.jam). Needs the packages scripts/setup.sh
# installs. It builds the debug variant without debug symbols (-O0), the quickest to
# compile: the check is that the Jamroot builds, not how fast the result runs. `b2 -j2`
# builds and runs everything in the release variant instead.
#
#   bash scripts/b2-check.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
b2 -j"$(nproc)" variant=debug debug-symbols=off stage cluster_algorithms
