#!/usr/bin/env bash
# Issue 33 item 1, as the review reproduced it: two sandboxes of two users made by
# `sandboxctl acquire` (network mode open, the default); from inside alice's, a bounded probe
# (three tries, 2 s each, busybox nc) of bob's address on the engine's network and his API port
# gets nothing. The same probe of bob's own address from inside bob's answers, so silence is the
# isolation and not a broken probe. The only traffic to container addresses is between these
# two containers, from inside them.
#   isolation_test.sh SANDBOXCTL
set -u
ctl="$1"
# shellcheck source=engine_lib.sh
source "$(dirname "$0")/engine_lib.sh"
require_engine
work=$(mktemp -d)
prefix="iso-$$"
cleanup() {
  remove_our_containers
  curl -s --max-time 30 --unix-socket "$socket" -X DELETE "http://d/networks/$prefix-sandboxes" >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -m 700 "$work/state"
cat >"$work/cfg.json" <<JSON
{"sandbox": {"backend": {"use": "local_docker:LocalContainerBackend", "image": "$image",
  "socket": "unix://$socket", "container_prefix": "$prefix", "memory": "256m", "cpus": 1},
  "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore", "path": "$work/leases.db"},
  "base_dir": "$work/state"}}
JSON
id_of() { sed -n 's/^sandbox_id: *//p'; }
alice=$("$ctl" --config "$work/cfg.json" acquire --user alice --thread t-1 | id_of)
bob=$("$ctl" --config "$work/cfg.json" acquire --user bob --thread t-1 | id_of)
[ -n "$alice" ] && [ -n "$bob" ] || { echo "FAIL: the two acquires did not both succeed"; exit 1; }

# A probe from inside container $1 to $2:8080; prints the first line answered, or nothing.
probe() {
  python3 - "$socket" "$1" "$2" <<'PY'
import http.client, json, socket, sys
sock_path, container, address = sys.argv[1:]
class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.settimeout(60); self.sock.connect(sock_path)
def call(method, path, body=None):
    c = Conn("d"); c.request(method, path, json.dumps(body) if body else None,
                             {"Content-Type": "application/json"})
    r = c.getresponse(); data = r.read(); c.close(); return r.status, data
script = ("for i in 1 2 3; do r=$(printf 'GET /v1/sandbox HTTP/1.0\\r\\n\\r\\n' | timeout 3 nc -w 2 "
          + address + " 8080 2>/dev/null | head -1); [ -n \"$r\" ] && { echo \"$r\"; exit 0; }; "
          "sleep 0.3; done; exit 1")
status, data = call("POST", f"/containers/{container}/exec",
                    {"Cmd": ["sh", "-c", script], "AttachStdout": True, "AttachStderr": True})
exec_id = json.loads(data)["Id"]
status, data = call("POST", f"/exec/{exec_id}/start", {"Detach": False, "Tty": False})
text = data.decode("latin-1")
at = text.find("HTTP/1.")
print(text[at:text.find("\r", at)] if at >= 0 else "")
PY
}
inspect() {
  curl -s --max-time 30 --unix-socket "$socket" "http://d/containers/$prefix-$1/json"
}
address=$(inspect "$bob" | python3 -c '
import json, sys
d = json.load(sys.stdin)["NetworkSettings"]
nets = [n.get("IPAddress") for n in (d.get("Networks") or {}).values() if n.get("IPAddress")]
print(nets[0] if nets else d.get("IPAddress", ""))')
[ -n "$address" ] || { echo "FAIL: bob's sandbox has no address on the engine's network"; exit 1; }
own=$(probe "$prefix-$bob" "$address")
case "$own" in HTTP/1.*) ;; *) echo "FAIL: the probe does not work even on bob's own address"; exit 1 ;; esac
reached=$(probe "$prefix-$alice" "$address")
echo "isolation: alice -> bob $address:8080: ${reached:-nothing (3 tries)}"
"$ctl" --config "$work/cfg.json" destroy "$alice" >/dev/null 2>&1
"$ctl" --config "$work/cfg.json" destroy "$bob" >/dev/null 2>&1
if [ -n "$reached" ]; then
  echo "FAIL: alice's sandbox reached bob's API ($reached)"
  exit 1
fi
echo "isolation: ok"
