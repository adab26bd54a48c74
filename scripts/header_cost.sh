#!/usr/bin/env bash
# Fails when a file with only `#include <rpclb/cluster.hpp>` preprocesses to more than
# LIMIT lines (default 100000): the cheap entry point of doc/explanation/header-cost.md.
# Run by ctest as unit.header_cost and by b2 in `unit`.
#
#   scripts/header_cost.sh CXX INCLUDE_DIR [LIMIT]
set -euo pipefail
cxx=$1
include=$2
limit=${3:-100000}
lines=$(printf '#include <rpclb/cluster.hpp>\n' | "$cxx" -std=c++20 -I"$include" -E -x c++ - | wc -l)
echo "<rpclb/cluster.hpp> preprocesses to $lines lines (limit $limit)"
if [ "$lines" -gt "$limit" ]; then
    echo "header_cost: <rpclb/cluster.hpp> grew over $limit lines: a header it includes now" \
         "pulls in Boost.JSON, Asio or another large header (doc/explanation/header-cost.md)" >&2
    exit 1
fi
