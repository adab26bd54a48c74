#!/usr/bin/env bash
# Installs what rpclb needs on Debian 12 (idempotent) and builds it with CMake into build/.
# Usage: bash scripts/setup.sh [extra cmake args...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RPCLB_BUILD_DIR:-$root/build}"

# Exact Debian 12 package names. Never the unversioned libboost-*-dev (that is Boost 1.74
# and would remove 1.81). etcd-server gives the `etcd` binary that
# integration.etcd_discovery starts on its own ports (doc/how-to/discovery.md). dpkg-dev
# gives dpkg-shlibdeps, from which `cpack -G DEB` takes the packages' run-time dependencies.
packages=(g++ cmake ninja-build pkg-config dpkg-dev
          libboost1.81-all-dev libboost1.81-tools-dev libboost-json1.81-dev libboost-url1.81-dev
          libssl-dev libxxhash-dev libbenchmark-dev iproute2 nftables ccache
          etcd-server)
missing=()
# The browser test of the admin console page (test/browser/) drives Debian's chromium with
# Node.js. RPCLB_SETUP_BROWSER=0 leaves it out. npm only when no npm command exists: a
# Node.js from another source bundles its own, and Debian's npm would conflict with it.
browser="${RPCLB_SETUP_BROWSER:-1}"
if [ "$browser" = 1 ]; then
  packages+=(chromium nodejs)
  command -v npm >/dev/null || packages+=(npm)
fi
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
fi

# The test's own node_modules, exactly as its lock file says (npm ci), redone only when the
# lock file changed since the last run.
if [ "$browser" = 1 ]; then
  lock_sum=$(sha256sum "$root/test/browser/package-lock.json" | cut -d' ' -f1)
  stamp="$root/test/browser/node_modules/.rpclb-lock-sha256"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
    echo "setup: npm ci in test/browser"
    (cd "$root/test/browser" && npm ci --no-audit --no-fund)
    echo "$lock_sum" >"$stamp"
  fi
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
