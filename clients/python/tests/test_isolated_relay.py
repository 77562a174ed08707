"""Issue 33: network mode ``isolated`` through a real ``sandboxctl serve`` on the engine. The
sandbox has no network and no published port; its only way in is serve's relay, with its token.
DeerFlow's ``AioSandbox`` (a stand-in with DeerFlow's ``request_headers`` signature over a client
that makes real HTTP requests) gets the relay URL and headers from the DeerFlow provider and
sends them on every request, with no DeerFlow change. The refusals are asked with plain HTTP, as
curl would. A serve restarted with ``--on-exit leave`` inherits the sandbox: the URL and token
handed out before still work."""

from __future__ import annotations

import json
import sys
import textwrap
import types
import urllib.error
import urllib.request

import pytest

from conftest import IMAGE, ENGINE_SOCKET, engine_containers

import sandboxd
from sandboxd import deerflow as sandboxd_deerflow

TOKEN_HEADER = "X-Sandboxd-Relay-Token"


def isolated_section(prefix: str, state) -> dict:
    return {
        "backend": {"use": "local_docker:LocalContainerBackend",
                    "socket": f"unix://{ENGINE_SOCKET}", "image": IMAGE,
                    "container_prefix": prefix, "memory": "256m", "cpus": 1},
        "network": {"mode": "isolated"},  # DeerFlow's sandbox.network, at the sandbox level
        "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                      "path": str(state / "leases.db")},
        "base_dir": str(state),
    }


def get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


class StandInAioSandbox:
    """DeerFlow's ``AioSandbox(id, base_url, home_dir=None, request_headers=None)`` (its network
    modes), over a client that sends the headers with every request, as agent-sandbox does."""

    def __init__(self, id, base_url, home_dir=None, request_headers=None,
                 default_command_timeout=None):
        self.id, self.base_url, self.request_headers = id, base_url, dict(request_headers or {})

    def sandbox_status(self) -> tuple[int, bytes]:
        return get(self.base_url + "/v1/sandbox", self.request_headers)


def test_an_isolated_sandbox_answers_only_through_the_relay_with_its_token(
        engine_required, make_serve, tmp_path, prefix, monkeypatch):
    state = tmp_path / "state"
    served = make_serve("state", "--on-exit", "leave", section=isolated_section(prefix, state))
    relay = served.info["relay"]
    assert relay.startswith("http://127.0.0.1:"), served.info
    client = served.client()

    # DeerFlow's provider, with DeerFlow's AioSandbox taking request_headers.
    monkeypatch.setattr(sandboxd_deerflow, "_DeerFlowSandbox", StandInAioSandbox)
    provider = sandboxd_deerflow.SandboxdProvider(client=client)
    alice_id = provider.acquire("t-1", user_id="alice")
    alice = provider.get(alice_id)
    assert alice.base_url == f"{relay}/s/{alice_id}"
    assert set(alice.request_headers) == {TOKEN_HEADER}
    status, body = alice.sandbox_status()
    assert status == 200, body

    bob = client.acquire("t-1", user_id="bob")
    # No published port: the engine's record of the container has no port binding.
    containers = engine_containers(f"{prefix}-{alice_id}")
    assert len(containers) == 1 and containers[0]["Ports"] == [], containers
    # curl's view: no token, a wrong one, another sandbox's: refused, with nothing from it.
    assert get(alice.base_url + "/v1/sandbox")[0] == 401
    assert get(alice.base_url + "/v1/sandbox", {TOKEN_HEADER: "x" * 43})[0] == 403
    assert get(alice.base_url + "/v1/sandbox", bob.request_headers)[0] == 403
    assert get(bob.sandbox_url + "/v1/sandbox", bob.request_headers)[0] == 200
    metrics = client.metrics()
    assert 'sandboxd_relay_requests_total{result="missing_token"} 1' in metrics
    assert 'sandboxd_relay_requests_total{result="wrong_token"} 2' in metrics

    # A restart keeps every token valid and every sandbox reachable at the same URL.
    assert served.stop() == 0
    again = make_serve("state", "--on-exit", "destroy", section=isolated_section(prefix, state))
    assert again.info["relay"] == relay
    assert again.info["inherited_active"] == 2
    status, body = alice.sandbox_status()
    assert status == 200, body
    again.client().destroy(alice_id)
    again.client().destroy(bob.sandbox_id)
    assert get(alice.base_url + "/v1/sandbox", alice.request_headers)[0] == 404


def test_the_one_shot_cli_refuses_isolated_mode_naming_the_hosts_that_serve_it(
        engine_required, tmp_path, prefix):
    import subprocess
    from conftest import SANDBOXCTL
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = tmp_path / "isolated.json"
    config.write_text(json.dumps({"sandbox": isolated_section(prefix, state)}))
    done = subprocess.run([SANDBOXCTL, "--config", str(config), "acquire", "--user", "alice",
                           "--thread", "t-1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert "needs a long-running host" in done.stderr and "sandboxctl serve" in done.stderr
    assert engine_containers(prefix) == [], "a sandbox nobody can reach was made"
