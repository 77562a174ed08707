"""Issue 34: sandboxd-provisioner runs the egress proxy for backends that make sandboxes in their
own network namespace. With a backend that cannot (the example process backend), network mode
allowlist would leave its sandboxes with nobody to proxy for them: refused at start, naming the
key, before anything listens."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import EXAMPLE_PLUGIN_DIR, PROVISIONER, needs_binaries


def test_allowlist_with_a_backend_without_network_namespaces_is_refused_at_start(tmp_path):
    needs_binaries()
    if not PROVISIONER:
        pytest.skip("needs SANDBOXD_PROVISIONER")
    config = tmp_path / "provisioner.json"
    config.write_text(json.dumps({"provisioner": {
        "api_key": "k" * 32, "host_base_dir": str(tmp_path / "state"),
        "plugin_dirs": [EXAMPLE_PLUGIN_DIR],
        "backend": {"use": "process_backend:ProcessSandboxBackend",
                    "work_dir": str(tmp_path / "sandboxes"),
                    "network": {"mode": "allowlist", "allow_domains": ["pypi.org"]}}}}))
    done = subprocess.run([PROVISIONER, "--config", str(config), "--listen", "127.0.0.1:0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "listening" not in done.stdout
    assert "provisioner.backend.network.mode: allowlist" in done.stderr, done.stderr
