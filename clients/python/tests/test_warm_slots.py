"""Pre-started slots through serve and the Python client, on the real engine: a new
conversation is ``claimed`` from a slot with its own user data, the misses are counted with
their reason, a claimed sandbox survives a SIGKILLed serve as the conversation's sandbox, and
nothing (container or host mount) is left once the next serve has reconciled and stopped."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.parse
from pathlib import Path

from conftest import EngineConnection, engine_containers, engine_section


def engine_get(path: str) -> int:
    conn = EngineConnection()
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    return response.status


def container_has_file(container: str, path: str) -> bool:
    quoted = urllib.parse.quote(path, safe="")
    return engine_get(f"/containers/{container}/archive?path={quoted}") == 200


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def wait_for_ready_slots(client, count: int, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    text = client.metrics()
    while metric(text, "sandboxd_slots_ready") < count and time.monotonic() < deadline:
        time.sleep(0.1)
        text = client.metrics()
    assert metric(text, "sandboxd_slots_ready") >= count, text
    return text


def mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point.startswith(prefix):
            points.append(point)
    return points


def slots_section(prefix: str, state: Path) -> dict:
    section = engine_section(prefix, state)
    section["backend"]["warm_slots"] = 1
    return section


def test_a_new_conversation_claims_a_slot_and_a_sigkilled_serve_leaves_nothing_behind(
        make_serve, prefix, tmp_path):
    state = tmp_path / "slots-state"
    first = make_serve("slots-state", section=slots_section(prefix, state))
    client = first.client()
    assert 'sandboxd_slots_target 1' in client.metrics().splitlines()

    # The first conversation teaches the pool its mount points: created cold, counted as a miss.
    teacher = client.acquire("t-first", user_id="alice")
    assert teacher.path == "created"
    text = wait_for_ready_slots(client, 1)
    assert 'sandboxd_slot_misses_total{reason="none_ready"} 1' in text.splitlines()

    # The gateway writes into the next conversation's user data before it asks for a sandbox.
    data = Path(str(state)) / "users" / "bob" / "threads" / "t-new" / "user-data" / "workspace"
    data.mkdir(parents=True, exist_ok=True)
    (data / "before.txt").write_text("written by the gateway\n")
    claimed = client.acquire("t-new", user_id="bob")
    assert claimed.path == "claimed", claimed
    info = client.get(claimed.sandbox_id)
    assert info["user_id"] == "bob" and info["thread_id"] == "t-new"
    name = f"{prefix}-{claimed.sandbox_id}"
    assert container_has_file(name, "/mnt/user-data/workspace/before.txt")
    text = client.metrics()
    assert 'sandboxd_acquires_total{path="claimed"} 1' in text.splitlines()
    assert metric(text, "sandboxd_slot_claims_total") == 1
    assert 'sandboxd_slots_off{reason=""} 0' in text.splitlines()

    # SIGKILL: no clean-up runs. The claimed sandbox keeps running with its host mounts.
    wait_for_ready_slots(client, 1)
    first.stop(signal.SIGKILL)
    assert engine_containers(f"{prefix}-slot-"), "the refilled slot should outlive the kill"

    # The next serve takes the claimed sandbox over as bob's, never as a slot, and reaps the
    # dead gateway's unclaimed slot.
    second = make_serve("slots-state", "--on-exit", "destroy", section=slots_section(prefix, state))
    client = second.client()
    again = client.acquire("t-new", user_id="bob")
    assert again.sandbox_id == claimed.sandbox_id and again.sandbox_url == claimed.sandbox_url
    assert again.path in ("reused", "reclaimed", "discovered"), again
    assert client.get(again.sandbox_id)["user_id"] == "bob"
    assert container_has_file(name, "/mnt/user-data/workspace/before.txt")
    wait_for_ready_slots(client, 1)
    slots = engine_containers(f"{prefix}-slot-")
    assert len([c for c in slots if c["State"] == "running"]) == 1, slots

    # Alice's first sandbox still has the dead gateway's lease (until its TTL): taking her
    # conversation over makes it this serve's, so that it goes with the rest below.
    assert client.acquire("t-first", user_id="alice").sandbox_id == teacher.sandbox_id

    assert second.stop() == 0
    deadline = time.monotonic() + 15
    while engine_containers(prefix) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [c["Names"] for c in engine_containers(prefix)] == []
    assert mounts_under(state / "local_docker-slots") == []


def test_check_config_says_whether_slots_can_work_before_anything_starts(engine_required, prefix,
                                                                           tmp_path):
    import os
    import subprocess

    from conftest import SANDBOXCTL

    def check(section: dict) -> dict:
        config = tmp_path / "check.json"
        config.write_text(json.dumps({"sandbox": section}))
        done = subprocess.run([SANDBOXCTL, "--config", str(config), "check-config", "--json"],
                              capture_output=True, text=True, timeout=60, env=os.environ)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    here = check(slots_section(prefix, state))
    assert "pre_started_slots" in here["backend_capabilities"]
    assert here["pre_started_slots"] == {"warm_slots": 1, "off_reason": ""}
    assert not (state / "local_docker-slots").exists(), "check-config must write nothing"
    assert engine_containers(prefix) == [], "check-config must start nothing"

    remote = slots_section(prefix, state)
    remote["backend"]["socket"] = "tcp://127.0.0.1:9"
    off = check(remote)["pre_started_slots"]["off_reason"]
    assert "tcp://127.0.0.1:9" in off and "unix socket" in off, off

    without = check(engine_section(prefix, state))
    assert "pre_started_slots" not in without
