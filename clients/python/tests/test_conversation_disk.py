"""Each conversation's storage against its bound in serve's /metrics (docs/storage.md): a state
directory on a btrfs filesystem the test makes (loop-mounted; quotas are how conversations are
bounded there), sandboxes from the example process_backend (no engine), a file written into
one conversation's workspace seen in its gauge and not in its neighbour's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from conftest import EXAMPLE_PLUGIN_DIR, SANDBOXCTL, Serve

LIMIT = 20 << 20


@pytest.fixture
def btrfs_dir(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a filesystem needs root")
    if shutil.which("mkfs.btrfs") is None:
        pytest.skip("mkfs.btrfs is missing (btrfs-progs; scripts/setup.sh installs it)")
    image = tmp_path / "btrfs.img"
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    subprocess.run(["truncate", "-s", "256M", str(image)], check=True)
    subprocess.run(["mkfs.btrfs", "-q", str(image)], check=True, capture_output=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def disk_gauges(metrics: str) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(user, thread, sandbox) → (bytes, limit) from the exposition."""
    found: dict[tuple[str, str, str], list[int]] = {}
    pattern = re.compile(r'^sandboxd_conversation_disk(_limit)?_bytes\{user_id="([^"]*)",'
                         r'thread_id="([^"]*)",sandbox_id="([^"]*)"\} (\d+)$')
    for line in metrics.splitlines():
        if match := pattern.match(line):
            entry = found.setdefault(match.group(2, 3, 4), [0, 0])
            entry[1 if match.group(1) else 0] = int(match.group(5))
    return {key: (value[0], value[1]) for key, value in found.items()}


def test_metrics_show_each_conversations_disk_against_its_bound(btrfs_dir, tmp_path):
    if not SANDBOXCTL or not os.path.exists(os.path.join(EXAMPLE_PLUGIN_DIR, "process_backend.so")):
        pytest.skip("needs SANDBOXCTL and SANDBOXD_EXAMPLE_PLUGIN_DIR (ctest sets them)")
    state = btrfs_dir / "state"
    section = {
        "backend": {"use": "process_backend:ProcessSandboxBackend",
                    "work_dir": str(tmp_path / "sandboxes")},
        "ownership": {"use": "ownership_memory:MemoryOwnershipStore"},
        "base_dir": str(state),
        "disk_limit": "20m",
        "min_free_disk": "16m",  # the floor, below the small filesystem's free space
        "plugin_dirs": [EXAMPLE_PLUGIN_DIR],
    }
    served = Serve(state, "unused", "--on-exit", "destroy", section=section)
    try:
        client = served.client()
        alice = client.acquire("t-1", user_id="alice")
        bob = client.acquire("t-2", user_id="bob")
        workspace = state / "users" / "alice" / "threads" / "t-1" / "user-data" / "workspace"
        (workspace / "data").write_bytes(b"x" * (5 << 20))
        os.sync()  # btrfs counts quota groups at each commit; sync commits now

        gauges = disk_gauges(client.metrics())
        alice_bytes, alice_limit = gauges[("alice", "t-1", alice.sandbox_id)]
        bob_bytes, bob_limit = gauges[("bob", "t-2", bob.sandbox_id)]
        assert alice_limit == LIMIT and bob_limit == LIMIT
        assert alice_bytes >= 5 << 20, alice_bytes
        assert bob_bytes < 1 << 20, "alice's file counted against bob"
        assert "sandboxd_conversation_disk_unlisted 0" in client.metrics()

        # The series go with the sandbox.
        client.destroy(alice.sandbox_id)
        assert ("alice", "t-1", alice.sandbox_id) not in disk_gauges(client.metrics())
    finally:
        assert served.stop() == 0
