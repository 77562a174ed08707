#!/usr/bin/env bash
# Starts and stops a container engine the "docker"-labelled tests (and sandboxctl's built-in
# default) run against, on a private unix socket, plus an offline-built test image. ENGINE is
# podman (its Docker-compatible REST API, the default) or docker (dockerd started by hand: there
# is no systemd here); $SANDBOXD_TEST_ENGINE chooses it when the argument is left out.
#
#   bash scripts/test_engine.sh start [ENGINE]   # start it (idempotent), build the image, then
#                                                # prove it runs a container as the plugin does
#   bash scripts/test_engine.sh stop [ENGINE]    # remove our containers, stop it (idempotent)
#   bash scripts/test_engine.sh env [ENGINE]     # the exports a shell or a test run needs
#   bash scripts/test_engine.sh status [ENGINE]  # say whether it answers
#   bash scripts/test_engine.sh ours [ENGINE]    # names of containers labelled as ours
#
# State lives in $SANDBOXD_ENGINE_DIR (default /tmp/sandboxd-test-engine): ENGINE.sock,
# ENGINE.pid, ENGINE.log, containers.conf (podman), docker-data and docker-exec (dockerd's data
# and exec roots), and the image build tree.
#
# Machine constraints this encodes (Debian 12): podman 4.3's crun fails on the hybrid cgroup
# layout, so runtime = runc with the cgroupfs manager; raising rlimits is not permitted, so the
# default ulimits are pinned at or below the current limits. dockerd 20.10 runs with the cgroupfs
# driver and --iptables=false --ip6tables=false, which keeps its chains out of the shared host
# firewall (127.0.0.1 publishing still works through docker-proxy); it leaves its docker0 bridge
# behind when it stops, so stop deletes it.
set -euo pipefail

DIR="${SANDBOXD_ENGINE_DIR:-/tmp/sandboxd-test-engine}"
ENGINE="${2:-${SANDBOXD_TEST_ENGINE:-podman}}"
case "$ENGINE" in
  podman | docker) ;;
  *)
    echo "test_engine: error: unknown engine '$ENGINE' (use podman or docker)" >&2
    exit 2
    ;;
esac
SOCK="$DIR/$ENGINE.sock"
PIDFILE="$DIR/$ENGINE.pid"
LOGFILE="$DIR/$ENGINE.log"
CONF="$DIR/containers.conf"
IMAGE="localhost/sandboxd-test-sandbox:latest"
LABEL="sandboxd.managed-by=sandboxd"
START_TIMEOUT="${SANDBOXD_ENGINE_START_TIMEOUT:-30}"

die() {
  echo "test_engine: error: $*" >&2
  exit 1
}
say() { echo "test_engine: $*"; }

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed (run scripts/setup.sh)"
}

# Every binary the engine path uses, with the Debian package that brings it: a fresh machine
# lacking one fails here, by name, instead of failing every container test later.
preflight() {
  local missing=()
  local entry path package
  local entries=(runc:runc curl:curl)
  if [ "$ENGINE" = podman ]; then
    entries+=(podman:podman conmon:conmon iptables:iptables
              /usr/libexec/podman/catatonit:catatonit
              /usr/lib/cni/bridge:containernetworking-plugins
              /usr/lib/cni/portmap:containernetworking-plugins)
  else
    entries+=(dockerd:docker.io docker:docker.io docker-proxy:docker.io containerd:containerd
              containerd-shim-runc-v2:containerd docker-init:tini ip:iproute2)
  fi
  for entry in "${entries[@]}"; do
    path="${entry%%:*}"
    package="${entry##*:}"
    if [[ "$path" == /* ]]; then
      [ -x "$path" ] || missing+=("$path (Debian package $package)")
    else
      command -v "$path" >/dev/null 2>&1 || [ -x "/usr/sbin/$path" ] ||
        [ -x "/usr/bin/$path" ] || missing+=("$path (Debian package $package)")
    fi
  done
  if ((${#missing[@]})); then
    die "the container engine cannot run sandboxes here; missing: ${missing[*]}." \
      "Install them with 'bash scripts/setup.sh' (or apt-get install the packages named)."
  fi
}

# Runs one container the way local_docker creates one (an init process as PID 1, port 8080
# published on 127.0.0.1, a read-only bind mount) and checks it answers through that port and
# serves the mounted file. Fails at once with the engine's own words and a hint.
probe_engine() {
  local name="sandboxd-engine-probe"
  local probe_dir="$DIR/probe"
  rm -rf "$probe_dir"
  mkdir -p "$probe_dir"
  local marker="probe-$$-$RANDOM"
  echo "$marker" >"$probe_dir/marker"
  pm rm -f "$name" >/dev/null 2>&1 || true
  local out
  if ! out="$(pm run -d --init -p 127.0.0.1::8080 -v "$probe_dir:/www/probe:ro" \
                --name "$name" "$IMAGE" 2>&1)"; then
    pm rm -f "$name" >/dev/null 2>&1 || true
    local hint=""
    case "$out" in
      *catatonit* | *container-init*) hint=" Install Debian package catatonit (scripts/setup.sh does)." ;;
      *docker-init*) hint=" Install Debian package tini (scripts/setup.sh does)." ;;
      *iptables*) hint=" Install Debian package iptables (scripts/setup.sh does)." ;;
      *cni* | *CNI*) hint=" Install Debian package containernetworking-plugins (scripts/setup.sh does)." ;;
    esac
    die "the engine could not run a probe container (init, 127.0.0.1 port, bind mount): $out.$hint"
  fi
  local port="" answer="" waited=0
  while ((waited < 40)); do
    port="$(pm port "$name" 8080/tcp 2>/dev/null | head -n1 | sed 's/.*://')"
    if [ -n "$port" ]; then
      answer="$(curl -s --max-time 2 "http://127.0.0.1:$port/probe/marker" 2>/dev/null || true)"
      [ "$answer" = "$marker" ] && break
    fi
    sleep 0.25
    waited=$((waited + 1))
  done
  pm rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$probe_dir"
  [ -n "$port" ] || die "the probe container published no host port for 8080 (check $LOGFILE)"
  [ "$answer" = "$marker" ] ||
    die "the probe container did not serve its bind-mounted file on 127.0.0.1:$port within 10s" \
      "(got '${answer:0:80}'; check $LOGFILE)"
  say "probe container ran with an init, a 127.0.0.1 port and a bind mount"
}

write_conf() {
  mkdir -p "$DIR"
  cat >"$CONF" <<'EOF'
# Written by scripts/test_engine.sh; regenerated on every start.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
}

export_env() {
  export CONTAINERS_CONF="$CONF"
}

service_pid() {
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Make sure the PID still belongs to our service and was not recycled.
  local signature="system service"
  [ "$ENGINE" = docker ] && signature="dockerd"
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$signature" || return 1
  echo "$pid"
}

ping_ok() {
  [ -S "$SOCK" ] || return 1
  [ "$(curl -s --max-time 2 --unix-socket "$SOCK" http://d/_ping 2>/dev/null || true)" = "OK" ]
}

# The engine's own CLI against our socket; the subcommands used here mean the same in both.
pm() {
  if [ "$ENGINE" = podman ]; then
    podman --url "unix://$SOCK" "$@"
  else
    docker -H "unix://$SOCK" "$@"
  fi
}

build_image() {
  if pm image inspect "$IMAGE" >/dev/null 2>&1; then
    say "image $IMAGE present"
    return 0
  fi
  local busybox=""
  for candidate in /bin/busybox /usr/bin/busybox; do
    if [ -x "$candidate" ] && file_is_static "$candidate"; then
      busybox="$candidate"
      break
    fi
  done
  [ -n "$busybox" ] || die "no statically linked busybox found (install busybox-static)"
  say "building $IMAGE offline from $busybox"
  local root="$DIR/image-build/rootfs"
  rm -rf "$DIR/image-build"
  mkdir -p "$root"/{bin,sbin,etc,tmp,proc,sys,dev,www/v1,var/run}
  chmod 1777 "$root/tmp"
  cp "$busybox" "$root/bin/busybox"
  local applet
  for applet in $("$root/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
  done
  echo '{"status":"ok","sandbox":"sandboxd-test"}' >"$root/www/v1/sandbox"
  echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
  echo 'root:x:0:' >"$root/etc/group"
  # PID 1 (or catatonit's child) must stop promptly on TERM: httpd runs in the background and
  # the shell waits for it, so the trap fires as soon as TERM arrives.
  cat >"$root/entrypoint.sh" <<'EOF'
#!/bin/sh
busybox httpd -f -p 8080 -h /www &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; exit 0' TERM INT
wait "$child"
EOF
  chmod 755 "$root/entrypoint.sh"
  tar -C "$root" -c . | pm import \
    --change 'CMD ["/bin/sh","/entrypoint.sh"]' \
    --change 'ENV PATH=/bin:/sbin' \
    --change 'EXPOSE 8080' \
    - "$IMAGE" >/dev/null || die "$ENGINE import of $IMAGE failed"
  rm -rf "$DIR/image-build"
  say "built $IMAGE"
}

file_is_static() {
  # busybox-static's binary has no interpreter; ldd says "not a dynamic executable".
  ! ldd "$1" >/dev/null 2>&1
}

# Starts the engine's service in the background, detached from this shell (setsid: it must
# outlive it and must not get the caller's job signals), and prints its PID.
launch_service() {
  if [ "$ENGINE" = podman ]; then
    setsid podman system service --time=0 "unix://$SOCK" >"$LOGFILE" 2>&1 </dev/null &
  else
    mkdir -p "$DIR/docker-data" "$DIR/docker-exec"
    # gVisor as a second runtime (docs/runtimes.md): Debian's runsc runs here only with the
    # host's network stack, which inside a container is the container's own namespace.
    local runtimes='{}'
    if [ -x /usr/bin/runsc ]; then
      runtimes='{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]}}}'
    fi
    printf '%s\n' "$runtimes" >"$DIR/docker-daemon.json"
    setsid dockerd --host "unix://$SOCK" --data-root "$DIR/docker-data" \
      --config-file "$DIR/docker-daemon.json" \
      --exec-root "$DIR/docker-exec" --pidfile "$DIR/dockerd-own.pid" \
      --exec-opt native.cgroupdriver=cgroupfs --iptables=false --ip6tables=false \
      >"$LOGFILE" 2>&1 </dev/null &
  fi
  echo $!
}

cmd_start() {
  preflight
  write_conf
  export_env
  local pid
  if pid="$(service_pid)" && ping_ok; then
    say "$ENGINE service already running (pid $pid) on $SOCK"
  else
    if pid="$(service_pid)"; then
      say "stale service pid $pid does not answer; stopping it"
      kill "$pid" 2>/dev/null || true
      sleep 1
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$SOCK" "$PIDFILE"
    say "starting the $ENGINE service on unix://$SOCK (log: $LOGFILE)"
    pid="$(launch_service)"
    echo "$pid" >"$PIDFILE"
    local waited=0
    until ping_ok; do
      if ! kill -0 "$pid" 2>/dev/null; then
        rm -f "$PIDFILE"
        echo "---- $LOGFILE" >&2
        tail -n 20 "$LOGFILE" >&2 || true
        die "the $ENGINE service exited before answering on $SOCK"
      fi
      if ((waited >= START_TIMEOUT * 2)); then
        kill "$pid" 2>/dev/null || true
        rm -f "$PIDFILE"
        die "the $ENGINE service did not answer GET /_ping on $SOCK within ${START_TIMEOUT}s (see $LOGFILE)"
      fi
      if ((waited % 4 == 0)); then
        say "waiting for $SOCK to answer /_ping ... ($((waited / 2))s of ${START_TIMEOUT}s)"
      fi
      sleep 0.5
      waited=$((waited + 1))
    done
    say "$ENGINE service up (pid $pid)"
  fi
  build_image
  probe_engine
  say "ready; run: eval \"\$(bash scripts/test_engine.sh env $ENGINE)\""
}

remove_our_containers() {
  # Works with or without the service: the local podman CLI reads the same storage.
  local ids=""
  if ping_ok; then
    ids="$(pm ps -aq --filter "label=$LABEL" 2>/dev/null || true)"
  elif [ "$ENGINE" = podman ]; then
    ids="$(podman ps -aq --filter "label=$LABEL" 2>/dev/null || true)"
  fi
  if [ -n "$ids" ]; then
    say "removing leftover containers labelled $LABEL: $(echo "$ids" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    if ping_ok; then pm rm -f $ids; else podman rm -f -t 1 $ids; fi >/dev/null 2>&1 ||
      say "warning: could not remove some containers"
  fi
}

cmd_stop() {
  if [ -f "$CONF" ]; then
    export_env
  fi
  if command -v "$ENGINE" >/dev/null 2>&1; then
    remove_our_containers
  fi
  local pid
  if pid="$(service_pid)"; then
    say "stopping the $ENGINE service (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "service did not exit on TERM within 15s; sending KILL"
      kill -9 "$pid" 2>/dev/null || true
    fi
  else
    say "$ENGINE service not running"
  fi
  rm -f "$PIDFILE" "$SOCK"
  # dockerd leaves its bridge behind; remove it unless another dockerd still uses it.
  if [ "$ENGINE" = docker ] && ! pgrep -x dockerd >/dev/null && ip link show docker0 >/dev/null 2>&1; then
    ip link delete docker0 && say "removed the docker0 bridge dockerd left behind"
  fi
}

cmd_env() {
  echo "export CONTAINERS_CONF=$CONF"
  echo "export SANDBOXD_TEST_ENGINE=$ENGINE"
  echo "export SANDBOXD_TEST_DOCKER_SOCKET=$SOCK"
}

cmd_ours() {
  ping_ok || return 0
  pm ps -a --filter "label=$LABEL" --format '{{.Names}}' 2>/dev/null || true
}

# The sandboxes' bridge networks, by id: a backend makes one per container prefix
# and removes it with its last sandbox.
cmd_our_networks() {
  ping_ok || return 0
  pm network ls --filter "label=sandboxd.network-for" --format '{{.ID}} {{.Name}}' 2>/dev/null || true
}

cmd_status() {
  local pid
  if pid="$(service_pid)" && ping_ok; then
    say "running (pid $pid) on $SOCK"
  else
    say "not running"
    return 1
  fi
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  status) cmd_status ;;
  ours) cmd_ours ;;
  our-networks) cmd_our_networks ;;
  *)
    echo "usage: $0 start|stop|env|status|ours|our-networks [podman|docker]   (state dir: \$SANDBOXD_ENGINE_DIR, default /tmp/sandboxd-test-engine)" >&2
    exit 2
    ;;
esac
