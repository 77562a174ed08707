#!/usr/bin/env bash
# sandboxctl's main job against the real engine (SANDBOXD_TEST_DOCKER_SOCKET, started by
# scripts/test.sh): every command a separate process, as an operator runs them.
#   - the built-in default (no --config) with a temporary HOME / XDG_STATE_HOME:
#     acquire -> curl -> list (active) -> release -> list (warm) -> acquire (reclaimed, same id)
#     -> acquire (reused) -> get -> destroy -> the engine has no such container;
#   - every exit code provoked, with --json error documents;
#   - two state directories sharing one lease database: a peer's takeover makes destroy and
#     release answer 6 and stop nothing; a third one's reconcile does not adopt a sandbox a
#     one-shot command just handed out;
#   - at the end no container with this run's prefix is left on the engine.
set -u
ctl="$1"
socket="${SANDBOXD_TEST_DOCKER_SOCKET:-}"
if [ -z "$socket" ] || [ ! -S "$socket" ]; then
  echo "SKIP: SANDBOXD_TEST_DOCKER_SOCKET is not a socket (scripts/test.sh starts the engine)"
  exit 77
fi
image="${SANDBOXD_TEST_IMAGE:-localhost/sandboxd-test-sandbox:latest}"
work=$(mktemp -d)
prefix="sbxctl-test-$$"
failures=0
passes=0

engine() {  # engine METHOD PATH: the Engine API answer's body
  curl -s --max-time 10 --unix-socket "$socket" -X "$1" "http://d$2"
}
containers_named() {  # how many containers (any state) have a name containing $1
  engine GET "/containers/json?all=true&filters=%7B%22name%22%3A%5B%22$1%22%5D%7D" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'
}
gone() {  # gone NAME: true once no container's name contains NAME (the engine's auto-remove
          # runs after the stop returns, so wait for it, bounded)
  for _ in $(seq 1 100); do
    [ "$(containers_named "$1")" = 0 ] && return 0
    sleep 0.1
  done
  return 1
}
cleanup() {
  local ids
  ids=$(engine GET "/containers/json?all=true&filters=%7B%22name%22%3A%5B%22$prefix%22%5D%7D" |
    python3 -c 'import json,sys; [print(c["Id"]) for c in json.load(sys.stdin)]' 2>/dev/null)
  for id in $ids; do engine DELETE "/containers/$id?force=true" >/dev/null; done
  if [ -n "${default_id:-}" ]; then
    engine DELETE "/containers/deer-flow-sandbox-$default_id?force=true" >/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT

check() {  # check NAME STATUS DETAIL
  if [ "$2" -eq 0 ]; then passes=$((passes + 1)); else
    failures=$((failures + 1)); echo "FAIL: $1"; echo "$3" | sed 's/^/    /'; fi
}
field() {  # field JSON EXPRESSION: python expression over the parsed document `d`
  python3 -c "import json,sys; d=json.loads(sys.argv[1]); print($2)" "$1" 2>/dev/null
}
expect_rc() {  # expect_rc NAME WANT COMMAND...: runs it, checks the exit code, keeps output
  local name="$1" want="$2"
  shift 2
  out=$("$@" 2>"$work/stderr"); rc=$?
  err=$(cat "$work/stderr")
  [ "$rc" -eq "$want" ]; check "$name exits $want (got $rc)" $? "stdout: $out
stderr: $err"
}

# ── the built-in default: no --config, a fresh HOME and XDG_STATE_HOME ─────────────────────
export HOME="$work/home" XDG_STATE_HOME="$work/xdg" DOCKER_HOST="unix://$socket"
export SANDBOXD_IMAGE="$image"
mkdir -p "$HOME"
expect_rc "check-config (default)" 0 "$ctl" check-config
grep -q "\"base_dir\": \"$work/xdg/sandboxd\"" <<<"$out"; check "default state dir" $? "$out"
grep -q "engine unix://$socket because DOCKER_HOST is set" <<<"$out"; check "default engine" $? "$out"

expect_rc "acquire (default)" 0 "$ctl" acquire --user alice --thread t-1 --json
id=$(field "$out" 'd["sandbox_id"]'); url=$(field "$out" 'd["sandbox_url"]'); default_id="$id"
[ "$(field "$out" 'd["path"]')" = created ]; check "first acquire creates" $? "$out"
[ -n "$id" ] && [ -n "$url" ]; check "acquire --json has sandbox_id and sandbox_url" $? "$out"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/v1/sandbox")
[ "$code" = 200 ]; check "curl \$url/v1/sandbox answers 200 (got $code)" $? "$url"
[ "$(stat -c %a "$work/xdg/sandboxd")" = 700 ]; check "state dir is 0700" $? "$(ls -ld "$work/xdg/sandboxd")"
[ "$(stat -c %a "$work/xdg/sandboxd/leases.db")" = 600 ]; check "lease db is 0600" $? ""

expect_rc "list" 0 "$ctl" list --json
row="[s for s in d['sandboxes'] if s['sandbox_id'] == '$id'][0]"
[ "$(field "$out" "$row['state'], $row['running'], $row['lease']['ours'], $row['thread_id']")" = \
  "active True True t-1" ]; check "list shows it active, running, our lease" $? "$out"

expect_rc "release (another process)" 0 "$ctl" release "$id"
expect_rc "list after release" 0 "$ctl" list --json
[ "$(field "$out" "$row['state']")" = warm ]; check "list shows it warm" $? "$out"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/v1/sandbox")
[ "$code" = 200 ]; check "a warm sandbox keeps running" $? "$code"

expect_rc "acquire again" 0 "$ctl" --json acquire --user alice --thread t-1
[ "$(field "$out" 'd["path"], d["sandbox_id"]')" = "reclaimed $id" ]; check "reclaims the same id" $? "$out"
expect_rc "acquire once more" 0 "$ctl" acquire --user alice --thread t-1 --json
[ "$(field "$out" 'd["path"]')" = reused ]; check "then reuses it" $? "$out"
expect_rc "get" 0 "$ctl" get "$id" --json
[ "$(field "$out" 'd["state"], d["user_id"], d["sandbox_url"]')" = "active alice $url" ]
check "get shows the active sandbox" $? "$out"
expect_rc "plain acquire output" 0 "$ctl" acquire --user alice --thread t-1
grep -q "^sandbox_id:  $id\$" <<<"$out" && grep -q "^sandbox_url: $url\$" <<<"$out"
check "plain output names id and URL" $? "$out"

expect_rc "destroy" 0 "$ctl" destroy "$id"
gone "deer-flow-sandbox-$id"; check "destroy removed the container" $? ""
expect_rc "get after destroy" 5 "$ctl" get "$id"
expect_rc "list after destroy" 0 "$ctl" list --json
[ "$(field "$out" "len([s for s in d['sandboxes'] if s['sandbox_id'] == '$id'])")" = 0 ]
check "list no longer shows it" $? "$out"

# ── exit codes, each provoked; --json errors are one document on stdout ─────────────────────
expect_rc "unknown command" 2 "$ctl" frobnicate
expect_rc "unknown option" 2 "$ctl" acquire --bogus
grep -q "see sandboxctl acquire --help" <<<"$err"; check "names the command's help" $? "$err"
expect_rc "bad thread id" 2 "$ctl" acquire --user alice --thread 'a/../b'
grep -q -- "--thread: .*'a/../b'" <<<"$err"; check "bad id message names flag and value" $? "$err"
expect_rc "release without id" 2 "$ctl" release
expect_rc "release unknown id" 5 "$ctl" release 0000000000000000 --json
[ "$(field "$out" 'd["error"]["code"], d["error"]["kind"]')" = "5 not_found" ]
check "--json error document" $? "$out"
grep -q "not tracked by state directory $work/xdg/sandboxd" <<<"$err"; check "not-found message" $? "$err"
echo '{"sandbox": {"replicas": "three"}}' >"$work/bad.json"
expect_rc "bad config" 3 "$ctl" --config "$work/bad.json" acquire --user alice --thread t-1
grep -q "bad.json: sandbox.replicas" <<<"$err"; check "config error names file and key" $? "$err"
cat >"$work/noengine.json" <<JSON
{"sandbox": {"backend": {"use": "local_docker:LocalContainerBackend", "image": "$image",
  "socket": "unix://$work/no-such.sock", "container_prefix": "$prefix"},
  "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore", "path": "$work/shared.db"},
  "base_dir": "$work/state-noengine"}}
JSON
expect_rc "engine unreachable" 4 "$ctl" --config "$work/noengine.json" acquire --user a --thread t
grep -q "no-such.sock" <<<"$err"; check "engine error names the socket" $? "$err"
# (list and reconcile cannot tell an unreachable engine from an empty one: the backend's
# list_running logs the failure and answers nothing, design §9.8.)

# ── two state directories, one lease database: ownership refused, nothing stopped ──────────
for name in a b c; do
  cat >"$work/$name.json" <<JSON
{"sandbox": {"backend": {"use": "local_docker:LocalContainerBackend", "image": "$image",
  "socket": "unix://$socket", "container_prefix": "$prefix"},
  "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore", "path": "$work/shared.db"},
  "base_dir": "$work/state-$name", "idle_timeout": 600}}
JSON
done
expect_rc "A acquires" 0 "$ctl" --config "$work/a.json" acquire --user bob --thread t-9 --json
shared_id=$(field "$out" 'd["sandbox_id"]')
expect_rc "C reconciles" 0 "$ctl" --config "$work/c.json" reconcile --json
[ "$(field "$out" 'd["adopted"]')" = 0 ] && [ "$(field "$out" 'd["deferred"] >= 1')" = True ]
check "a peer's reconcile defers a sandbox just handed out" $? "$out"
expect_rc "B acquires the same conversation" 0 "$ctl" --config "$work/b.json" acquire --user bob --thread t-9 --json
[ "$(field "$out" 'd["path"], d["sandbox_id"]')" = "discovered $shared_id" ]
check "B discovers A's running container" $? "$out"
expect_rc "A destroys after B's takeover" 6 "$ctl" --config "$work/a.json" destroy "$shared_id"
grep -q "held by .*sandboxctl-" <<<"$err"; check "refusal names the lease holder" $? "$err"
[ "$(containers_named "$prefix-$shared_id")" = 1 ]; check "a refused destroy stops nothing" $? ""
expect_rc "A releases after B's takeover" 6 "$ctl" --config "$work/a.json" release "$shared_id"
expect_rc "A no longer tracks it" 5 "$ctl" --config "$work/a.json" get "$shared_id"
expect_rc "B destroys" 0 "$ctl" --config "$work/b.json" destroy "$shared_id"

# ── reap: an idle sandbox of this state directory is stopped, a fresh one is not ───────────
# The reap reads idle_timeout from the config each run: 60 s while the sandbox is fresh (an
# acquire and a reap on a loaded CI machine took over 4 s), then 1 s for the same state
# directory, so neither check depends on how fast the machine is.
sed 's/"idle_timeout": 600/"idle_timeout": 60/; s/state-a/state-d/' "$work/a.json" >"$work/d.json"
expect_rc "D acquires (idle_timeout 60)" 0 "$ctl" --config "$work/d.json" acquire --user dan --thread t-1 --json
idle_id=$(field "$out" 'd["sandbox_id"]')
expect_rc "D reaps at once" 0 "$ctl" --config "$work/d.json" reap --json
[ "$(field "$out" 'len(d["reaped"])')" = 0 ]; check "a sandbox just used is not reaped" $? "$out"
sed -i 's/"idle_timeout": 60/"idle_timeout": 1/' "$work/d.json"
sleep 1.5
expect_rc "D reaps after the idle timeout (now 1 s)" 0 "$ctl" --config "$work/d.json" reap --json
[ "$(field "$out" 'd["reaped"]')" = "['$idle_id']" ]; check "the idle sandbox is reaped" $? "$out"
gone "$prefix-$idle_id"; check "and its container is gone" $? ""

# ── pause: reap pauses a released sandbox, acquire resumes it, list says so ──────
sed 's/"idle_timeout": 600/"idle_timeout": 600, "pause_after_seconds": 1/; s/state-a/state-p/' \
  "$work/a.json" >"$work/p.json"
expect_rc "P checks its config" 0 "$ctl" --config "$work/p.json" check-config --json
[ "$(field "$out" '"pause" in d["backend_capabilities"], d["config"]["pause_after_seconds"]')" = "True 1.0" ]
check "check-config shows the pause capability and the option" $? "$out"
[ "$(field "$out" '"usage" in d["backend_capabilities"]')" = "True" ]
check "check-config shows the usage capability (the operator page's figures)" $? "$out"
expect_rc "P acquires" 0 "$ctl" --config "$work/p.json" acquire --user pia --thread t-1 --json
pause_id=$(field "$out" 'd["sandbox_id"]')
pause_url=$(field "$out" 'd["sandbox_url"]')
expect_rc "P releases" 0 "$ctl" --config "$work/p.json" release "$pause_id"
sleep 1.2
expect_rc "P reaps (a pause pass)" 0 "$ctl" --config "$work/p.json" reap --json
[ "$(field "$out" 'd["newly_paused"], d["paused"]')" = "['$pause_id'] 1" ]
check "reap pauses the released sandbox" $? "$out"
[ "$(engine GET "/containers/$prefix-$pause_id/json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["State"]["Status"])')" = paused ]
check "the engine says paused" $? ""
expect_rc "P lists" 0 "$ctl" --config "$work/p.json" list --json
grep -q '"state": *"paused"' <<<"$out"; check "list shows state paused" $? "$out"
expect_rc "P acquires again" 0 "$ctl" --config "$work/p.json" acquire --user pia --thread t-1 --json
[ "$(field "$out" 'd["path"], d["sandbox_id"]')" = "resumed $pause_id" ]
check "the paused sandbox is resumed, same id" $? "$out"
curl -sf --max-time 5 "$pause_url/v1/sandbox" >/dev/null; check "and answers at once" $? "$pause_url"
expect_rc "P destroys" 0 "$ctl" --config "$work/p.json" destroy "$pause_id"

# ── a ceiling: replicas 1, overflow_policy reject → exit 7, kind capacity ──────
sed 's/"idle_timeout": 600/"idle_timeout": 600, "replicas": 1, "overflow_policy": "reject"/; s/state-a/state-r/' \
  "$work/a.json" >"$work/r.json"
expect_rc "R acquires its one slot" 0 "$ctl" --config "$work/r.json" acquire --user rex --thread t-1 --json
ceiling_id=$(field "$out" 'd["sandbox_id"]')
expect_rc "R is refused a second" 7 "$ctl" --config "$work/r.json" acquire --user rex --thread t-2 --json
[ "$(field "$out" 'd["error"]["kind"]')" = capacity ] && grep -q "the deployment holds 1 of 1 replica slots" <<<"$out"
check "the refusal is kind capacity and names the ceiling" $? "$out"
expect_rc "R destroys" 0 "$ctl" --config "$work/r.json" destroy "$ceiling_id"

# ── a peer-owned config check, and nothing of ours left behind ──────────────────────────────
expect_rc "check-config with a file" 0 "$ctl" --config "$work/a.json" check-config
gone "$prefix"; check "no container with prefix $prefix is left" $? \
  "$(engine GET '/containers/json?all=true')"

echo "sandboxctl engine: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
