"""Issue 20 A.2, A.8, A.9, A.10: a state directory someone else made is refused, every
installation has its own lease identity, a live socket is never stolen, ids are bounded."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PROVISIONER, process_section, run_ctl, write_config
from http_util import request

NOBODY = 65534


def as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("making a directory owned by another user needs root")


# ── A.2: a state directory made by someone else ─────────────────────────────────────────────

def test_a_state_directory_owned_by_another_user_is_refused_naming_owner_and_mode(binaries, tmp_path):
    as_root()
    planted = tmp_path / "deer-flow"
    planted.mkdir(mode=0o755)
    os.chown(planted, NOBODY, NOBODY)
    config = write_config(tmp_path / "cfg.json", process_section(tmp_path, planted))
    for command in (["acquire", "--user", "u1", "--thread", "t1"], ["list"]):
        rc, out, err = run_ctl(config, *command)
        assert rc == 3, (command, rc, out, err)
        assert str(planted) in err and "uid 65534" in err and "0755" in err, err
    assert not (planted / "users").exists(), "something was created in the planted directory"


def test_a_state_directory_others_can_write_is_refused(binaries, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    config = write_config(tmp_path / "cfg.json", process_section(tmp_path, shared))
    rc, out, err = run_ctl(config, "acquire", "--user", "u1", "--thread", "t1")
    assert rc == 3, (rc, out, err)
    assert "writable by every user" in err and "0777" in err, err


def test_a_state_directory_under_a_directory_others_can_swap_is_refused(binaries, tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # world-writable, no sticky bit: anyone can rename "state" away
    config = write_config(tmp_path / "cfg.json", process_section(tmp_path, open_dir / "state"))
    rc, out, err = run_ctl(config, "acquire", "--user", "u1", "--thread", "t1")
    assert rc == 3, (rc, out, err)
    assert str(open_dir) in err and "sticky" in err, err


def test_serve_refuses_a_planted_state_directory_and_touches_nothing_in_it(binaries, tmp_path, serves):
    as_root()
    planted = tmp_path / "deer-flow"
    planted.mkdir(mode=0o755)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (planted / "serve.lock").symlink_to(victim)
    os.chown(planted, NOBODY, NOBODY)
    config = write_config(tmp_path / "cfg.json", process_section(tmp_path, planted))
    s = serves(config, log=tmp_path / "serve.log", expect_start=False)
    assert s.process.wait(timeout=30) == 3
    assert victim.read_text() == "precious\n", "serve.lock was followed into another file"
    assert "uid 65534" in (tmp_path / "serve.log").read_text()


def test_a_missing_state_directory_is_created_private(binaries, tmp_path):
    state = tmp_path / "new" / "state"
    config = write_config(tmp_path / "cfg.json", process_section(tmp_path, state))
    rc, out, err = run_ctl(config, "list")
    assert rc == 0, err
    assert state.stat().st_mode & 0o777 == 0o700


def test_the_provisioner_refuses_a_state_root_someone_else_made(binaries, tmp_path):
    as_root()
    if not PROVISIONER:
        pytest.skip("needs SANDBOXD_PROVISIONER")
    planted = tmp_path / "deer-flow"
    planted.mkdir(mode=0o755)
    os.chown(planted, NOBODY, NOBODY)
    done = subprocess.run([PROVISIONER, "--listen", "127.0.0.1:0"], capture_output=True,
                          text=True, timeout=30,
                          env={**os.environ, "PROVISIONER_API_KEY": "k",
                               "DEER_FLOW_HOST_BASE_DIR": str(planted)})
    assert done.returncode == 3, done
    assert str(planted) in done.stderr and "uid 65534" in done.stderr, done.stderr


# ── A.8: one lease identity per installation, not per (hostname, path) ─────────────────────

def test_two_installations_with_the_same_hostname_and_path_are_two_owners(binaries, tmp_path):
    """Cloned VMs, or containers sharing the host's UTS namespace, see the same hostname and
    state path; each mount namespace here plays one of them, over one shared lease file."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for private mount namespaces")
    shared_path = tmp_path / "srv-state"
    shared_path.mkdir(mode=0o700)
    owners = []
    for host in ("host-a", "host-b"):
        real = tmp_path / host
        real.mkdir(mode=0o700)
        config = write_config(tmp_path / f"{host}.json", process_section(tmp_path, shared_path))
        script = (f"mount --bind {real} {shared_path} && "
                  f"{SANDBOXCTL_PATH()} --config {config} list --json")
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        import json
        owners.append(json.loads(done.stdout)["owner_id"])
        # The same installation keeps its identity from one process to the next.
        again = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                               capture_output=True, text=True, timeout=60)
        assert json.loads(again.stdout)["owner_id"] == owners[-1]
    assert owners[0] != owners[1], f"both installations lease as {owners[0]}"
    identity = tmp_path / "host-a" / "instance-id"
    assert identity.exists() and identity.stat().st_mode & 0o777 == 0o600


def SANDBOXCTL_PATH() -> str:
    from conftest import SANDBOXCTL
    return SANDBOXCTL


# ── A.9: a second serve never steals a live socket ──────────────────────────────────────────

def test_a_second_serve_on_a_live_socket_path_refuses_and_the_first_keeps_serving(binaries, tmp_path, serves):
    sock = tmp_path / "gateway.sock"
    first_state = tmp_path / "first"
    second_state = tmp_path / "second"
    first = serves(write_config(tmp_path / "a.json", process_section(tmp_path, first_state)),
                   "--listen", f"unix:{sock}", log=tmp_path / "a.log")
    second = serves(write_config(tmp_path / "b.json", process_section(tmp_path, second_state)),
                    "--listen", f"unix:{sock}", log=tmp_path / "b.log", expect_start=False)
    rc = second.process.wait(timeout=30)
    assert rc != 0, "the second serve started on a socket another serve answers"
    assert "is in use" in (tmp_path / "b.log").read_text()
    status, body, _ = request(f"unix:{sock}", "GET", "/v1/health")
    assert status == 200 and body["owner_id"] == first.info["owner_id"]
    assert first.stop() == 0


def test_a_stale_socket_file_is_replaced(binaries, tmp_path, serves):
    import socket
    sock = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock))
    s.close()  # a socket file nobody listens on: what a killed serve leaves
    served = serves(write_config(tmp_path / "a.json", process_section(tmp_path, tmp_path / "st")),
                    "--listen", f"unix:{sock}", log=tmp_path / "a.log")
    status, _, _ = request(f"unix:{sock}", "GET", "/v1/health")
    assert status == 200
    assert served.stop() == 0


# ── A.10: one bound on ids wherever they enter ─────────────────────────────────────────────

@pytest.mark.parametrize("length", [129, 300])
def test_a_user_id_longer_than_128_is_refused_by_the_cli_and_by_serve(binaries, tmp_path, serves, length):
    config = write_config(tmp_path / "cfg.json", process_section(tmp_path, tmp_path / "state"))
    rc, out, err = run_ctl(config, "acquire", "--user", "u" * length, "--thread", "t1")
    assert rc == 2, (rc, out, err)
    assert "at most 128" in err, err
    served = serves(config, "--on-exit", "destroy", log=tmp_path / "serve.log")
    status, body, _ = request(served.listen, "POST", "/v1/sandboxes/acquire",
                              {"user_id": "u" * length, "thread_id": "t1"})
    assert status == 400, body
    assert "at most 128" in body["error"]["message"]
    status, body, _ = request(served.listen, "POST", "/v1/sandboxes/acquire",
                              {"user_id": "u" * 128, "thread_id": "t1"})
    assert status == 200, body
    assert served.stop() == 0
