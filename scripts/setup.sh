#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine: every package the build, the tests and the local container
# engines (podman and Docker) need (nothing may rely on what a machine happens to have), then configures and builds
# into ./build, then starts the local podman engine that `sandboxctl` uses by default and the
# tests run against (scripts/test_engine.sh; SANDBOXD_SETUP_NO_ENGINE=1 skips that). Safe to run
# again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git clang-format
  libboost-dev libboost-filesystem-dev libboost-program-options-dev
  rapidjson-dev libcurl4-openssl-dev libsqlite3-dev libssl-dev libhiredis-dev redis-server redis-tools
  # yaml-cpp: sandboxctl and serve read DeerFlow's own config.yaml.
  libyaml-cpp-dev
  # libidn2: the egress proxy compares host names in their IDNA form.
  libidn2-dev
  # python3-venv and python3-wheel-whl: the test that installs clients/python into a fresh
  # virtual environment offline (pip and setuptools come with the venv, wheel from Debian).
  python3-venv python3-wheel-whl
  libgtest-dev libgmock-dev libcpp-httplib-dev python3-pytest
  # The libFuzzer targets (scripts/fuzz.sh): clang, and its runtime libraries (libFuzzer, ASan,
  # UBSan), which are only a Recommends of clang.
  clang libclang-rt-14-dev
  # The benchmark's syscall and instruction counts (scripts/bench.sh); taskset for the one-CPU
  # ThreadSanitizer pass (scripts/tsan.sh).
  strace valgrind util-linux
  # The engine path: podman with its OCI runtime, monitor and init binary (catatonit is only a
  # Recommends of podman, and the backend runs every sandbox with an init process), CNI
  # networking with iptables for 127.0.0.1 port publishing, busybox for the offline test image.
  podman runc conmon catatonit containernetworking-plugins iptables uidmap slirp4netns
  busybox-static
  # Docker, the second engine the engine suites run on: dockerd with containerd, runc and tini
  # (its docker-init); iproute2 removes the bridge dockerd leaves, procps finds its process.
  docker.io containerd tini iproute2 procps
  curl python3
  # btrfs-progs: the storage tests make a loop-mounted btrfs to bound conversations on
  # (docs/storage.md); the product itself needs no program of it (it speaks the kernel's ioctls).
  btrfs-progs
  # runsc: gVisor, the second runtime the engine tests run sandboxes under on Docker
  # (docs/runtimes.md); scripts/test_engine.sh declares it to the test dockerd.
  runsc
  # The Kubernetes stand-in (tests/support/kube_standin.py) and the real clients that check it:
  # openssl makes its TLS certificate, python3-kubernetes is the official Python client.
  openssl python3-kubernetes
  # The operator page is tested in a real browser (clients/python/tests/test_operator_page.py),
  # with a font for its screenshot (a recommendation apt skips here).
  chromium fonts-liberation
)
# Debian's kubectl (kubernetes-client) is the other client. Where another package already owns
# /usr/bin/kubectl (Google Cloud's CLI does), the two cannot be installed together; Debian's
# binary is then taken from its package into build/tools/debian-kubectl below.
kubectl_owner="$(dpkg-query -S /usr/bin/kubectl 2>/dev/null | cut -d: -f1 || true)"
if [ -z "$kubectl_owner" ] || [ "$kubectl_owner" = kubernetes-client ]; then
  packages+=(kubernetes-client)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build_type="${BUILD_TYPE:-RelWithDebInfo}"
# RelWithDebInfo with line tables only (-g1): a backtrace or a sanitizer report still names each
# function, file and line, and the build takes about a third less time than with full -g (the
# variables' debug info). BUILD_TYPE=Debug for a debugger's full view.
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" -DSANDBOXD_WERROR=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
cmake --build build -j"$(nproc)"
echo "setup: built into ./build"

if [ -n "$kubectl_owner" ] && [ "$kubectl_owner" != kubernetes-client ] &&
   [ ! -x build/tools/debian-kubectl/usr/bin/kubectl ]; then
  echo "setup: /usr/bin/kubectl belongs to $kubectl_owner; extracting Debian's kubectl from kubernetes-client into build/tools/debian-kubectl"
  deb_dir="$(mktemp -d)"
  (cd "$deb_dir" && { apt-get download kubernetes-client 2>/dev/null ||
    { $sudo_cmd apt-get update -qq && apt-get download kubernetes-client; }; })
  mkdir -p build/tools/debian-kubectl
  dpkg-deb -x "$deb_dir"/kubernetes-client_*.deb build/tools/debian-kubectl
  rm -rf "$deb_dir"
fi

if [ -z "${SANDBOXD_SETUP_NO_ENGINE:-}" ]; then
  bash scripts/test_engine.sh start
fi
