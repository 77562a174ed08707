"""Issue 46: a conversation's sandbox saved and restored through every door: serve's routes
and the Python client (snapshot, list, acquire from_snapshot, delete), and the one-shot CLI
(`sandboxctl snapshot`, `snapshots`, `acquire --from-snapshot`, `snapshot-rm`), on the engine.
A file written in the container's layer and one in the workspace come back; another user's
snapshot is refused unless allowed; the user's ceiling answers 429 / exit 7."""

from __future__ import annotations

import json
import subprocess
import time

from conftest import (ENGINE_SOCKET, IMAGE, SANDBOXCTL, EngineConnection, containers_left,
                      engine_exec, engine_section)

import sandboxd


def snapshot_images(prefix: str) -> list[str]:
    """The engine's image tags made by snapshots of containers named ``prefix``-…."""
    conn = EngineConnection()
    conn.request("GET", "/images/json")
    return [tag for image in json.loads(conn.getresponse().read())
            for tag in image.get("RepoTags") or [] if f"{prefix}-snapshot:" in tag]


def write_both(container: str, tag: str) -> None:
    code, out = engine_exec(container, ["sh", "-c",
                                        f"echo {tag} > /etc/layer-file && "
                                        f"echo {tag} > /mnt/user-data/workspace/ws-file"])
    assert code == 0, out


def read_both(container: str) -> tuple[str, str]:
    _, layer = engine_exec(container, ["cat", "/etc/layer-file"])
    _, workspace = engine_exec(container, ["cat", "/mnt/user-data/workspace/ws-file"])
    return layer.strip(), workspace.strip()


def one_shot_cli(tmp_path, prefix: str, **settings):
    """A runner of one-shot ``sandboxctl`` commands over the test engine with a private state
    directory and ``settings`` in the sandbox section."""
    state = tmp_path / "cli-state"
    state.mkdir(mode=0o700)
    config = tmp_path / "cli.json"
    config.write_text(json.dumps({"sandbox": {
        "backend": {"use": "local_docker:LocalContainerBackend",
                    "socket": f"unix://{ENGINE_SOCKET}", "image": IMAGE,
                    "container_prefix": prefix},
        "base_dir": str(state), **settings}}))

    def cli(*words: str) -> subprocess.CompletedProcess:
        return subprocess.run([SANDBOXCTL, "--config", str(config), *words],
                              capture_output=True, text=True, timeout=180)
    return cli


def test_serve_and_the_client_save_and_restore_a_conversation(engine_required, make_serve,
                                                               prefix):
    served = make_serve("state", "--on-exit", "destroy")
    client = served.client()
    box = client.acquire("t-1", user_id="alice")
    name = f"{prefix}-{box.sandbox_id}"
    write_both(name, "saved")
    made = client.snapshot(box.sandbox_id, "before")
    assert made["name"] == "before" and made["user_id"] == "alice" and made["bytes"] > 0
    write_both(name, "changed-after")
    client.destroy(box.sandbox_id)

    restored = client.acquire("t-1", user_id="alice", from_snapshot="before")
    assert restored.path == "restored" and restored.sandbox_id == box.sandbox_id
    assert read_both(f"{prefix}-{restored.sandbox_id}") == ("saved", "saved")
    listed = client.snapshots("alice")
    assert [s["name"] for s in listed] == ["before"]
    assert client.snapshots("bob") == []

    # Another user's snapshot: refused unless allowed, then made into bob's conversation.
    try:
        client.acquire("t-9", user_id="bob", from_snapshot="before", snapshot_user_id="alice")
        raise AssertionError("bob got alice's snapshot unasked")
    except sandboxd.SandboxdError as error:
        assert error.status == 400 and "allow_other_user" in str(error)
    bobs = client.acquire("t-9", user_id="bob", from_snapshot="before",
                          snapshot_user_id="alice", allow_other_user=True)
    assert read_both(f"{prefix}-{bobs.sandbox_id}") == ("saved", "saved")

    metrics = client.metrics()
    assert 'sandboxd_acquires_total{path="restored"} 2' in metrics, metrics
    client.delete_snapshot("before", user_id="alice")
    assert client.snapshots() == []


def test_the_cli_saves_lists_restores_and_deletes(engine_required, make_serve, tmp_path, prefix):
    cli = one_shot_cli(tmp_path, prefix, max_snapshots_per_user=1)

    got = cli("acquire", "--user", "carol", "--thread", "t-1", "--json")
    assert got.returncode == 0, got.stderr
    sandbox = json.loads(got.stdout)["sandbox_id"]
    write_both(f"{prefix}-{sandbox}", "cli")
    made = cli("snapshot", sandbox, "--name", "one", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["name"] == "one"
    again = cli("snapshot", sandbox, "--name", "two")
    assert again.returncode == 7 and "max_snapshots_per_user" in again.stderr, again.stderr
    listed = cli("snapshots")
    assert listed.returncode == 0 and "one" in listed.stdout and "carol/t-1" in listed.stdout
    assert cli("destroy", sandbox).returncode == 0
    restored = cli("acquire", "--user", "carol", "--thread", "t-1", "--from-snapshot", "one",
                   "--json")
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["path"] == "restored"
    assert read_both(f"{prefix}-{sandbox}") == ("cli", "cli")
    missing = cli("snapshot-rm", "nosuch", "--user", "carol")
    assert missing.returncode == 5, missing.stderr
    gone = cli("snapshot-rm", "one", "--user", "carol")
    assert gone.returncode == 0, gone.stderr
    assert cli("destroy", sandbox).returncode == 0
    assert containers_left(prefix) == []
    # The deleted snapshot's image was in use until that destroy: the same command removes it
    # (no later command on this state directory may come).
    assert snapshot_images(prefix) == []


def test_a_fork_through_serve_and_the_cli_makes_new_conversations(engine_required, make_serve,
                                                                  tmp_path, prefix):
    """A fork through serve and the Python client (named threads, then a count), each fork with
    the source's files and its own copy; an existing conversation answers 409; the one-shot CLI's
    fork prints the new sandboxes (--json) and refuses an existing conversation with exit 6."""
    served = make_serve("state", "--on-exit", "destroy")
    client = served.client()
    source = client.acquire("t-1", user_id="alice")
    write_both(f"{prefix}-{source.sandbox_id}", "forked")
    made = client.fork(source.sandbox_id, ["try-a", "try-b"])
    assert [m.path for m in made] == ["restored", "restored"]
    assert len({m.sandbox_id for m in made} | {source.sandbox_id}) == 3
    for fork in made:
        assert read_both(f"{prefix}-{fork.sandbox_id}") == ("forked", "forked")
    engine_exec(f"{prefix}-{made[0].sandbox_id}",
                ["sh", "-c", "echo only-a > /mnt/user-data/workspace/ws-file"])
    assert read_both(f"{prefix}-{made[1].sandbox_id}") == ("forked", "forked")
    counted = client.fork(source.sandbox_id, count=2)
    assert len(counted) == 2
    try:
        client.fork(source.sandbox_id, ["try-a"])
        raise AssertionError("a fork replaced an existing conversation")
    except sandboxd.SandboxdError as error:
        assert error.status == 409 and "exists already" in str(error)
    assert 'sandboxd_acquires_total{path="restored"} 4' in client.metrics()
    assert client.snapshots("alice") == [], "the fork's snapshot stayed"
    for fork in made + counted:
        client.destroy(fork.sandbox_id)
    client.destroy(source.sandbox_id)
    served.stop()  # serve removes the images nothing runs from as it stops

    cli = one_shot_cli(tmp_path, prefix)

    got = cli("acquire", "--user", "carol", "--thread", "t-1", "--json")
    assert got.returncode == 0, got.stderr
    sandbox = json.loads(got.stdout)["sandbox_id"]
    write_both(f"{prefix}-{sandbox}", "cli-fork")
    forked = cli("fork", sandbox, "--thread", "c-a", "--thread", "c-b", "--json")
    assert forked.returncode == 0, forked.stderr
    answer = json.loads(forked.stdout)
    assert answer["from_sandbox_id"] == sandbox
    assert [m["thread_id"] for m in answer["sandboxes"]] == ["c-a", "c-b"]
    for fork in answer["sandboxes"]:
        assert read_both(f"{prefix}-{fork['sandbox_id']}") == ("cli-fork", "cli-fork")
    again = cli("fork", sandbox, "--thread", "c-a")
    assert again.returncode == 6 and "exists already" in again.stderr, again.stderr
    text = cli("fork", sandbox, "--count", "1")
    assert text.returncode == 0 and "1 conversation forked from sandbox" in text.stdout, text
    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    for tracked in json.loads(listed.stdout)["sandboxes"]:
        assert cli("destroy", tracked["sandbox_id"]).returncode == 0
    assert containers_left(prefix) == []
    # The forks' images went with their last sandbox: each command removes the ones nothing
    # runs from any more (the engine finishes a removal just after the stop answers).
    for _ in range(20):
        if not snapshot_images(prefix):
            break
        cli("snapshots")
        time.sleep(0.3)
    assert snapshot_images(prefix) == []


def test_the_deerflow_provider_snapshots_restores_and_forks(engine_required, make_serve, prefix):
    """The DeerFlow provider's extension: snapshot, restore into the conversation, fork; every
    sandbox it hands out is tracked, so DeerFlow's ``get`` answers for it from the cache."""
    from sandboxd.deerflow import SandboxdProvider

    served = make_serve("state", "--on-exit", "destroy")
    provider = SandboxdProvider(served.listen[len("unix:"):])
    source = provider.acquire("t-1", user_id="erin")
    write_both(f"{prefix}-{source}", "deerflow")
    made = provider.snapshot(source, "prepared")
    assert made["name"] == "prepared" and made["user_id"] == "erin"
    assert [s["name"] for s in provider.snapshots("erin")] == ["prepared"]

    forks = provider.fork(source, ["d-a", "d-b"])
    assert len(set(forks) | {source}) == 3
    for fork in forks:
        assert provider.get(fork) is not None and provider.get(fork).id == fork
        assert read_both(f"{prefix}-{fork}") == ("deerflow", "deerflow")

    write_both(f"{prefix}-{source}", "changed")
    provider.destroy(source)
    assert provider.get(source) is None
    restored = provider.acquire_from_snapshot("t-1", "prepared", user_id="erin")
    assert restored == source and provider.get(restored) is not None
    assert read_both(f"{prefix}-{restored}") == ("deerflow", "deerflow")
    provider.delete_snapshot("prepared", user_id="erin")
    assert provider.snapshots("erin") == []
    for sandbox_id in [*forks, restored]:
        provider.destroy(sandbox_id)
    provider.shutdown()


def test_an_idle_conversation_is_archived_and_its_next_acquire_restores_it(engine_required,
                                                                            tmp_path, prefix):
    """The archived tier through the one-shot CLI: released, then past archive_after_seconds,
    `reap` snapshots the sandbox and removes its container; the next acquire of the
    conversation makes it from the archive (path restored, its layer and workspace back)."""
    cli = one_shot_cli(tmp_path, prefix, archive_after_seconds=1, idle_timeout=3600)
    got = cli("acquire", "--user", "dora", "--thread", "t-1", "--json")
    assert got.returncode == 0, got.stderr
    sandbox = json.loads(got.stdout)["sandbox_id"]
    write_both(f"{prefix}-{sandbox}", "archived-state")
    assert cli("release", sandbox).returncode == 0

    early = cli("reap", "--json")
    assert early.returncode == 0, early.stderr
    assert json.loads(early.stdout)["archived"] == [], "archived before archive_after_seconds"
    time.sleep(1.2)
    reaped = cli("reap", "--json")
    assert reaped.returncode == 0, reaped.stderr
    assert json.loads(reaped.stdout)["archived"] == [sandbox], reaped.stdout
    assert containers_left(prefix) == [], "the archived sandbox's container stayed"
    listed = json.loads(cli("snapshots", "--json").stdout)
    assert [s["name"] for s in listed["snapshots"]] == [f"archive-{sandbox}"], listed
    rows = json.loads(cli("list", "--json").stdout)["sandboxes"]
    assert [(r["sandbox_id"], r["state"], r["running"], r["user_id"], r["thread_id"])
            for r in rows] == [(sandbox, "archived", False, "dora", "t-1")], rows
    assert rows[0]["archived_bytes"] == listed["snapshots"][0]["bytes"] > 0, rows
    text = cli("list").stdout
    assert "archived" in text and "archive of" in text, text

    again = cli("acquire", "--user", "dora", "--thread", "t-1", "--json")
    assert again.returncode == 0, again.stderr
    answer = json.loads(again.stdout)
    assert (answer["path"], answer["sandbox_id"]) == ("restored", sandbox), answer
    assert read_both(f"{prefix}-{sandbox}") == ("archived-state", "archived-state")
    assert json.loads(cli("snapshots", "--json").stdout)["snapshots"] == [], \
        "the archive outlived its restore"
    assert cli("destroy", sandbox).returncode == 0
    assert containers_left(prefix) == []
    assert snapshot_images(prefix) == [], "the archive's image outlived its last sandbox"


def test_serve_archives_an_idle_conversation_on_its_own_and_shows_it(engine_required, make_serve,
                                                                     tmp_path, prefix):
    """serve's idle checker archives a released conversation past archive_after_seconds with
    no command asking; /metrics counts it and its bytes; the client's next acquire of the
    conversation is restored transparently."""
    state = tmp_path / "archiving"
    served = make_serve("archiving", "--on-exit", "destroy",
                        section=engine_section(prefix, state, archive_after_seconds=1,
                                               idle_timeout=3600))
    client = served.client()
    box = client.acquire("t-1", user_id="erin")
    write_both(f"{prefix}-{box.sandbox_id}", "kept-by-serve")
    client.release(box.sandbox_id)
    deadline = time.monotonic() + 30
    metrics = client.metrics()
    while "sandboxd_archived_conversations 1" not in metrics and time.monotonic() < deadline:
        time.sleep(0.25)
        metrics = client.metrics()
    assert "sandboxd_archived_conversations 1" in metrics, metrics
    archived_bytes = [line for line in metrics.splitlines()
                      if line.startswith("sandboxd_archived_bytes ")]
    assert archived_bytes and int(archived_bytes[0].split()[1]) > 0, archived_bytes
    assert containers_left(prefix) == [], "the archived sandbox's container stayed"
    # The archive is published before the container's teardown ends: the row turns archived
    # once the sandbox is no longer tracked.
    def archived_rows() -> list[dict]:
        return [r for r in client.list()["sandboxes"] if r["sandbox_id"] == box.sandbox_id]
    rows = archived_rows()
    while rows and rows[0]["state"] != "archived" and time.monotonic() < deadline:
        time.sleep(0.1)
        rows = archived_rows()
    assert [(r["state"], r["tracked"]) for r in rows] == [("archived", False)], rows
    assert rows[0]["archived_bytes"] == int(archived_bytes[0].split()[1]), rows

    again = client.acquire("t-1", user_id="erin")
    assert (again.path, again.sandbox_id) == ("restored", box.sandbox_id)
    assert read_both(f"{prefix}-{box.sandbox_id}") == ("kept-by-serve", "kept-by-serve")
    assert "sandboxd_archived_conversations 0" in client.metrics()
