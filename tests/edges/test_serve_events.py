"""Issue 36's events, first step: serve records what happens to sandboxes in a bounded ring and
answers ``GET /v1/events?after=N&limit=M`` (behind its token), oldest first, each numbered so a
reader resumes after the last one it saw, over the example process backend."""

from __future__ import annotations

from conftest import process_section, write_config
from http_util import request


def test_serve_answers_what_happened_in_order_and_resumes_after_a_number(
        binaries, tmp_path, serves):
    config = write_config(tmp_path / "serve.json", process_section(tmp_path, tmp_path / "state"))
    served = serves(config, "--on-exit", "destroy", log=tmp_path / "serve.log")
    status, empty, _ = request(served.listen, "GET", "/v1/events")
    assert status == 200 and empty == {"events": [], "last": 0, "dropped": 0}, empty

    status, made, _ = request(served.listen, "POST", "/v1/sandboxes/acquire",
                              {"user_id": "u1", "thread_id": "t-1"})
    assert status == 200, made
    sandbox_id = made["sandbox_id"]
    assert request(served.listen, "POST", f"/v1/sandboxes/{sandbox_id}/release")[0] == 200
    assert request(served.listen, "POST", "/v1/sandboxes/acquire",
                   {"user_id": "u1", "thread_id": "t-1"})[0] == 200
    assert request(served.listen, "DELETE", f"/v1/sandboxes/{sandbox_id}")[0] == 200

    status, page, _ = request(served.listen, "GET", "/v1/events")
    assert status == 200, page
    assert [e["kind"] for e in page["events"]] == ["created", "released", "reclaimed",
                                                    "destroyed"], page
    assert [e["sequence"] for e in page["events"]] == [1, 2, 3, 4]
    assert page["last"] == 4 and page["dropped"] == 0
    first = page["events"][0]
    assert first["sandbox_id"] == sandbox_id
    assert first["user_id"] == "u1"
    assert first["thread_id"] == "t-1"
    assert isinstance(first["time"], float) and first["time"] > 1.7e9
    assert first["reason"] == ""

    status, rest, _ = request(served.listen, "GET", "/v1/events?after=2&limit=1")
    assert status == 200 and [e["sequence"] for e in rest["events"]] == [3], rest

    for bad in ("after=-1", "after=x", "limit=0", "limit=1001", "after=1&after=2"):
        status, refused, _ = request(served.listen, "GET", "/v1/events?" + bad)
        assert status == 400, (bad, refused)
        assert refused["error"]["message"].startswith(bad.split("=")[0] + ": "), (bad, refused)
