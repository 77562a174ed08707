#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine: every package the build, the tests and the test container
# engine need, then configures and builds into ./build. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git clang-format
  libboost-dev libboost-filesystem-dev libboost-program-options-dev
  rapidjson-dev libcurl4-openssl-dev libsqlite3-dev libssl-dev
  libgtest-dev libgmock-dev libcpp-httplib-dev
  podman runc busybox-static uidmap slirp4netns containernetworking-plugins
  curl python3
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build_type="${BUILD_TYPE:-RelWithDebInfo}"
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" -DSANDBOXD_WERROR=ON
cmake --build build -j"$(nproc)"
echo "setup: built into ./build"
