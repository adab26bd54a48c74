#!/usr/bin/env bash
# Installs clang-14 and its sanitizer and libFuzzer runtimes (libclang-rt-14-dev) when they
# are missing: scripts/asan.sh and scripts/fuzz.sh compile with them. Idempotent.
set -euo pipefail
missing=()
for p in clang-14 libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-clang.sh: installing ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
$sudo_cmd apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
