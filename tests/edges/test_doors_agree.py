"""Issue 21: every door answers the same document for the same operation, because the core's
one SandboxService and its renderers (core/service_json.hpp) make both. Here the CLI's --json
and `sandboxctl serve`'s answers for one conversation, over the example process backend."""

from __future__ import annotations

import json

from conftest import process_section, run_ctl, write_config
from http_util import request


def shape(value):
    """The document's structure: keys and JSON types, recursively (values aside)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def test_the_cli_and_serve_answer_the_same_documents(binaries, tmp_path, serves):
    cli_config = write_config(tmp_path / "cli.json",
                              process_section(tmp_path / "a", tmp_path / "a" / "state"))
    serve_config = write_config(tmp_path / "serve.json",
                                process_section(tmp_path / "b", tmp_path / "b" / "state"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    served = serves(serve_config, "--on-exit", "destroy", log=tmp_path / "serve.log")
    conversation = {"user_id": "u1", "thread_id": "t1"}

    rc, out, err = run_ctl(cli_config, "acquire", "--user", "u1", "--thread", "t1", "--json")
    assert rc == 0, err
    by_cli = json.loads(out)
    status, by_serve, _ = request(served.listen, "POST", "/v1/sandboxes/acquire", conversation)
    assert status == 200, by_serve
    assert shape(by_cli) == shape(by_serve), (by_cli, by_serve)
    for key in ("sandbox_id", "path", "user_id", "thread_id"):
        assert by_cli[key] == by_serve[key], key
    sandbox_id = by_cli["sandbox_id"]

    rc, out, err = run_ctl(cli_config, "get", sandbox_id, "--json")
    assert rc == 0, err
    status, got, _ = request(served.listen, "GET", f"/v1/sandboxes/{sandbox_id}")
    assert status == 200
    assert shape(json.loads(out)) == shape(got)
    assert json.loads(out)["state"] == got["state"] == "active"

    rc, out, err = run_ctl(cli_config, "list", "--json")
    assert rc == 0, err
    status, listed, _ = request(served.listen, "GET", "/v1/sandboxes")
    assert status == 200
    assert shape(json.loads(out)) == shape(listed)

    rc, out, err = run_ctl(cli_config, "release", sandbox_id, "--json")
    assert rc == 0, err
    status, released, _ = request(served.listen, "POST", f"/v1/sandboxes/{sandbox_id}/release")
    assert shape(json.loads(out)) == shape(released)
    assert json.loads(out)["result"] == released["result"] == "released"

    # An error: the same kind and message; the CLI adds its exit code.
    rc, out, err = run_ctl(cli_config, "get", "0000000000000000", "--json")
    assert rc == 5
    status, missing, _ = request(served.listen, "GET", "/v1/sandboxes/0000000000000000")
    assert status == 404
    cli_error = json.loads(out)["error"]
    assert cli_error.pop("code") == 5
    assert cli_error["kind"] == missing["error"]["kind"] == "not_found"
    assert set(cli_error) == set(missing["error"])

    for config in (cli_config,):
        run_ctl(config, "destroy", sandbox_id)
    assert served.stop() == 0


def test_serve_names_a_wrong_method_405_with_allow_and_an_unknown_path_404(binaries, tmp_path,
                                                                            serves):
    """Issue 35.4: serve's routes are one table; a known path asked with a method it does not
    take is 405 naming the ones it does (not a 404 that reads as "no such sandbox"), a path no
    route takes is 404, both in the one error shape, and health stays open."""
    config = write_config(tmp_path / "serve.json",
                          process_section(tmp_path / "b", tmp_path / "b" / "state"))
    (tmp_path / "b").mkdir()
    served = serves(config, "--on-exit", "destroy", log=tmp_path / "serve.log")

    status, answer, headers = request(served.listen, "PUT", "/v1/sandboxes/0000000000000000")
    assert status == 405, answer
    assert headers["Allow"] == "GET, DELETE"
    assert answer["error"]["kind"] == "method_not_allowed"
    assert answer["error"]["message"] == "/v1/sandboxes/0000000000000000 takes GET, DELETE, not PUT"

    status, answer, headers = request(served.listen, "GET", "/v1/sandboxes/0000000000000000/release")
    assert status == 405 and headers["Allow"] == "POST", answer

    status, answer, headers = request(served.listen, "GET", "/v1/nothing/here")
    assert status == 404 and "Allow" not in headers, answer
    assert answer["error"] == {"kind": "not_found", "message": "no route GET /v1/nothing/here"}

    status, answer, _ = request(served.listen, "GET", "/v1/sandboxes/0000000000000000")
    assert status == 404 and answer["error"]["kind"] == "not_found", answer

    status, answer, _ = request(served.listen, "GET", "/v1/health")
    assert status == 200, answer
    assert served.stop() == 0
