"""The operator's live view, as a person uses it: serve on the engine over
127.0.0.1 with a token, sandboxes made through the API, the page opened in a real headless
Chromium driven over the DevTools protocol on a pipe (nothing listens for the browser), the
log-in form filled in, and what the page shows read back from its rendered DOM. Beside it,
the page's HTTP contract (credentials, cookie, headers) with plain http.client."""

from __future__ import annotations

import base64
import fcntl
import http.client
import json
import os
import secrets
import select
import shutil
import subprocess
import time
import types
import urllib.parse
from pathlib import Path

import pytest
from conftest import IMAGE, EngineConnection, engine_exec, engine_section

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# The API takes only letters, digits, - and _ in ids, but the page also lists what the engine
# holds under serve's prefix: a container someone else made there, labelled with markup.
XSS_USER = "<img src=x onerror=alert(1)>"


class DevTools:
    """A headless Chromium and one page in it, over --remote-debugging-pipe: commands go in on
    the browser's fd 3, answers and events come out on its fd 4, each a JSON text ended by NUL."""

    def __init__(self, profile: Path) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def give_pipes() -> None:  # in the child: the pipe ends become fds 3 and 4
            high_in = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 50)
            high_out = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 50)
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        self.process = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--remote-debugging-pipe", "--no-sandbox",
             "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-sync",
             "--window-size=1280,1000", f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=give_pipes, close_fds=False)
        os.close(to_browser_read)
        os.close(from_browser_write)
        os.set_blocking(self._from_browser, True)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], 0.5)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed its DevTools pipe")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, timeout: float = 30, **params) -> dict:
        self._next_id += 1
        command = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            command["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float = 20):
        """Polls `expression` in the page until it is truthy; its value. While the page is still
        loading (the element not there yet) it counts as false."""
        deadline = time.monotonic() + timeout
        guarded = f"(() => {{ try {{ return {expression}; }} catch (e) {{ return false; }} }})()"
        while time.monotonic() < deadline:
            value = self.evaluate(guarded)
            if value:
                return value
            time.sleep(0.1)
        text = self.evaluate("document.body ? document.body.innerText : ''")
        raise AssertionError(f"the page never showed {what}; it shows:\n{text}")

    def close(self) -> None:
        try:
            os.write(self._to_browser, json.dumps({"id": 0, "method": "Browser.close"}).encode()
                     + b"\0")
            self.process.wait(timeout=10)
        except Exception:  # noqa: BLE001 (a browser that will not close is killed)
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture
def browser(tmp_path):
    if not CHROMIUM:
        if os.environ.get("SANDBOXD_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed; scripts/setup.sh installs it")
        pytest.skip("needs Debian's chromium (scripts/setup.sh installs it)")
    tools = DevTools(tmp_path / "chromium-profile")
    yield tools
    tools.close()


@pytest.fixture
def page_serve(make_serve):
    token = secrets.token_urlsafe(24)
    served = make_serve("page", "--listen", "127.0.0.1:0", "--token-env", "PAGE_TOKEN",
                        "--on-exit", "destroy", env={"PAGE_TOKEN": token})
    served.token = token
    return served


def rows(tools: DevTools, body_id: str) -> list[dict]:
    return tools.evaluate(
        f"[...document.querySelectorAll('#{body_id} tr')].map(r => ({{"
        "data: Object.assign({}, r.dataset), cells: [...r.cells].map(c => c.textContent)}))")


def artefact_dir(tmp_path: Path) -> Path:
    where = Path(os.environ.get("SANDBOXD_TEST_ARTEFACTS", tmp_path / "artefacts"))
    where.mkdir(parents=True, exist_ok=True)
    return where


def plant_container(prefix: str, labels: dict) -> dict:
    """A running container of the test image under serve's prefix, made behind serve's back."""
    name = f"{prefix}-{secrets.token_hex(8)}"
    conn = EngineConnection()
    conn.request("POST", f"/containers/create?name={name}",
                 json.dumps({"Image": IMAGE, "Labels": {"sandboxd.managed-by": "sandboxd",
                                                        **labels}}),
                 {"Content-Type": "application/json"})
    answer = conn.getresponse()
    assert answer.status == 201, answer.read()
    answer.read()
    conn.request("POST", f"/containers/{name}/start")
    answer = conn.getresponse()
    assert answer.status in (204, 304), answer.read()
    answer.read()
    return {"name": name, "sandbox_id": name[len(prefix) + 1:]}


def remove_container(name: str) -> None:
    conn = EngineConnection()
    conn.request("DELETE", f"/containers/{name}?force=true")
    conn.getresponse().read()


@pytest.fixture
def request_finalizers():
    finalizers: list = []
    yield finalizers
    for finalize in finalizers:
        finalize()


def test_an_operator_logs_in_and_watches_sandboxes_come_and_go(page_serve, browser, tmp_path,
                                                                request_finalizers):
    client = page_serve.client(token=page_serve.token)
    alice = client.acquire("t-1", user_id="alice")
    planted = plant_container(page_serve.prefix, {"sandboxd.user-id": XSS_USER,
                                                  "sandboxd.thread-id": "t-planted"})
    request_finalizers.append(lambda: remove_container(planted["name"]))

    browser.call("Page.navigate", url=page_serve.listen + "/ui")
    browser.wait_for("!document.getElementById('login').hidden", "the log-in form")
    # Typed as a person types it, then the button pressed.
    browser.evaluate("document.getElementById('credential').focus()")
    browser.call("Input.insertText", text="not-the-token")
    browser.evaluate("document.querySelector('#login-form button').click()")
    browser.wait_for("document.getElementById('login-error').textContent === 'Wrong token.'",
                     "that the token was wrong")
    browser.evaluate("document.getElementById('credential').focus()")
    browser.call("Input.insertText", text=page_serve.token)
    browser.evaluate("document.querySelector('#login-form button').click()")

    browser.wait_for("document.querySelectorAll('#sandboxes tr').length === 2", "both sandboxes")
    shown = {row["data"]["sandbox"]: row for row in rows(browser, "sandboxes")}
    assert shown.keys() == {alice.sandbox_id, planted["sandbox_id"]}
    assert shown[alice.sandbox_id]["cells"][1:4] == ["active", "alice", "t-1"]
    assert shown[alice.sandbox_id]["cells"][5] == "created"  # how its last acquire went
    # A user id of markup is shown as that text; nothing of it became an element.
    assert shown[planted["sandbox_id"]]["cells"][2:4] == [XSS_USER, "t-planted"]
    assert browser.evaluate("document.querySelectorAll('img').length") == 0
    browser.wait_for("!!document.querySelector('#events tr[data-kind=created]')",
                     "the creation among the events")

    # The Flow panel: alice's acquire counted under its path, the latency histogram drawn.
    browser.wait_for("document.querySelector('#flow-acquires tr[data-path=created]')"
                     "?.cells[1].textContent === '1'", "the acquire counted under its path")
    assert browser.evaluate("document.getElementById('flow').hidden") is False
    assert browser.evaluate("document.querySelectorAll('#flow-latency li').length") == 13
    # The ceilings beside what counts against them: alice's sandbox (the planted container is
    # no one's here), serve's replicas, the busiest user, the queue.
    _, body = request(page_serve.listen, "GET", "/ui/api/flow",
                      {"Authorization": f"Bearer {page_serve.token}"})
    capacity = json.loads(body)["capacity"]
    ceilings = {row["data"]["ceiling"]: row["cells"] for row in rows(browser, "flow-capacity")}
    assert ceilings["replicas"][1:] == ["1", f"{capacity['replicas']} ({capacity['overflow_policy']})"]
    assert ceilings["per_user"][:2] == ["busiest user alice", "1"]
    assert ceilings["queue"][1] == "0"
    refusals = [row["cells"][0] for row in rows(browser, "flow-refusals")]
    assert "relay refused: wrong_token" in refusals and not any("egress" in r for r in refusals)
    assert ceilings["fleet"][1] == ("per gateway" if not capacity["fleet_wide"]
                                    else str(capacity["fleet_reserved"]))

    # What alice's sandbox uses, sampled by serve off the request path from the engine's
    # one-shot stats: its memory and processes, then its CPU once two readings are in.
    row = f"document.querySelector('#sandboxes tr[data-sandbox=\"{alice.sandbox_id}\"]')"
    browser.wait_for(f"/iB \\/ [0-9.]+ [KMG]iB$/.test({row}?.querySelector('.memory')?.textContent)",
                     "alice's memory against its limit", timeout=30)
    assert int(browser.evaluate(f"{row}.querySelector('.pids').textContent")) >= 1
    # Its conversation's storage: this test's state directory is not on btrfs, so unbounded.
    assert browser.evaluate(f"{row}.querySelector('.disk').textContent") == "unbounded"
    browser.wait_for(f"/^[0-9.]+ %$/.test({row}?.querySelector('.cpu')?.textContent)",
                     "alice's CPU from two readings", timeout=30)
    planted_row = f"document.querySelector('#sandboxes tr[data-sandbox=\"{planted['sandbox_id']}\"]')"
    assert browser.evaluate(f"{planted_row}.cells[6].textContent") == ""  # nobody's: not sampled

    # The session is in a cookie no script can read, for /ui only, sent to this site only, and
    # it is not the token.
    assert browser.evaluate("document.cookie") == ""
    cookies = browser.call("Network.getCookies", urls=[page_serve.listen + "/ui/api/health"])
    (cookie,) = cookies["cookies"]
    assert (cookie["name"], cookie["path"], cookie["httpOnly"], cookie["sameSite"]) == (
        "sandboxd_serve_ui", "/ui", True, "Strict")
    assert page_serve.token not in cookie["value"]
    assert page_serve.token.encode().hex() not in cookie["value"]
    assert page_serve.token not in browser.evaluate("location.href")

    # A release elsewhere shows up without a reload.
    marker = browser.evaluate("window.__not_reloaded = true")
    assert marker is True
    client.release(alice.sandbox_id)
    browser.wait_for(
        f"document.querySelector('#sandboxes tr[data-sandbox=\"{alice.sandbox_id}\"]')"
        "?.dataset.state === 'warm'", "the released sandbox as warm")
    browser.wait_for(
        f"!!document.querySelector('#events tr[data-kind=released][data-sandbox=\"{alice.sandbox_id}\"]')",
        "the release among the events")
    assert browser.evaluate("window.__not_reloaded") is True
    assert browser.evaluate("document.getElementById('count-warm').textContent") == "1warm"
    # Taken again: active, and its last acquire now says it came back from the pool.
    client.acquire("t-1", user_id="alice")
    browser.wait_for(
        f"document.querySelector('#sandboxes tr[data-sandbox=\"{alice.sandbox_id}\"]')"
        "?.cells[5].textContent === 'reclaimed'", "the sandbox's last acquire as reclaimed")

    shot = browser.call("Page.captureScreenshot", format="png")
    (artefact_dir(tmp_path) / "operator-page.png").write_bytes(base64.b64decode(shot["data"]))

    # Nothing the page did broke its own policy or a browser rule (a blocked script, a wrong
    # MIME type), no script error, no dialog; the only failed loads are the 401s before log-in.
    for event in browser.events:
        assert event["method"] != "Page.javascriptDialogOpening", event
        assert event["method"] != "Runtime.exceptionThrown", event
        if event["method"] == "Log.entryAdded":
            entry = event["params"]["entry"]
            if entry["level"] != "error":
                continue
            assert entry["source"] == "network" and "status of 401" in entry["text"], entry

    # Logging out ends the page's access.
    browser.evaluate("document.getElementById('logout').click()")
    browser.wait_for("!document.getElementById('login').hidden", "the log-in form again")
    assert browser.call("Network.getCookies", urls=[page_serve.listen + "/ui"])["cookies"] == []


def test_the_page_shows_an_archived_conversation_with_its_bytes(make_serve, browser, tmp_path,
                                                                prefix):
    """archive_after_seconds: a released conversation is archived by serve's idle checker; the
    page's table shows it as archived with the archive's size, without a reload."""
    token = secrets.token_urlsafe(24)
    served = make_serve("archiving-page", "--listen", "127.0.0.1:0", "--token-env", "PAGE_TOKEN",
                        "--on-exit", "destroy", env={"PAGE_TOKEN": token},
                        section=engine_section(prefix, tmp_path / "archiving-page",
                                               archive_after_seconds=1, idle_timeout=3600))
    client = served.client(token=token)
    box = client.acquire("t-1", user_id="alice")
    browser.call("Page.navigate", url=served.listen + "/ui")
    browser.wait_for("!document.getElementById('login').hidden", "the log-in form")
    browser.evaluate("document.getElementById('credential').focus()")
    browser.call("Input.insertText", text=token)
    browser.evaluate("document.querySelector('#login-form button').click()")
    row = f"document.querySelector('#sandboxes tr[data-sandbox=\"{box.sandbox_id}\"]')"
    browser.wait_for(f"{row}?.dataset.state === 'active'", "the sandbox as active")
    code, _ = engine_exec(f"{prefix}-{box.sandbox_id}",
                          ["sh", "-c", "echo kept > /mnt/user-data/workspace/kept"])
    assert code == 0
    client.release(box.sandbox_id)
    browser.wait_for(f"{row}?.dataset.state === 'archived'", "the conversation as archived",
                     timeout=40)
    listed = [r for r in client.list()["sandboxes"] if r["sandbox_id"] == box.sandbox_id]
    assert listed and listed[0]["archived_bytes"] > 0, listed
    cells = browser.evaluate(f"[...{row}.cells].map(c => c.textContent)")
    assert cells[1:4] == ["archived", "alice", "t-1"], cells
    assert browser.evaluate(f"{row}.querySelector('.disk').textContent").startswith("archive "), \
        cells
    # Its next acquire restores it, and the page shows it active again.
    assert client.acquire("t-1", user_id="alice").path == "restored"
    browser.wait_for(f"{row}?.dataset.state === 'active'", "the restored sandbox as active")


def request(listen: str, method: str, path: str, headers: dict | None = None):
    where = urllib.parse.urlsplit(listen)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=10)
    conn.request(method, path, headers=headers or {})
    answer = conn.getresponse()
    body = answer.read()
    conn.close()
    return answer, body


def test_the_page_answers_only_with_the_credential_and_under_a_strict_policy(page_serve):
    listen, token = page_serve.listen, page_serve.token

    # The page's files are open (they hold no data) and come with the policy.
    for path, kind in (("/ui", "text/html"), ("/ui/app.js", "text/javascript"),
                       ("/ui/app.css", "text/css")):
        answer, body = request(listen, "GET", path)
        assert answer.status == 200 and answer.getheader("Content-Type").startswith(kind), path
        policy = answer.getheader("Content-Security-Policy")
        assert "script-src 'self'" in policy and "default-src 'none'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert answer.getheader("X-Content-Type-Options") == "nosniff"
    _, page = request(listen, "GET", "/ui")
    assert b"<script>" not in page and b"onclick" not in page and b"style=" not in page

    # Data needs the credential: none, a made-up session, the token's hex in the cookie (what
    # the cookie held before), a wrong bearer are all 401.
    for headers in ({}, {"Cookie": "sandboxd_serve_ui=" + "ab" * 32},
                    {"Cookie": "sandboxd_serve_ui=zz"},
                    {"Cookie": "sandboxd_serve_ui=" + token.encode().hex()},
                    {"Authorization": "Bearer wrong"}):
        answer, body = request(listen, "GET", "/ui/api/sandboxes", headers)
        assert answer.status == 401, headers
        assert json.loads(body)["error"]["kind"] == "unauthorized"

    # A login takes the token in the header only, and answers with a session's cookie: a
    # random value of serve's, never the token or anything it derives to.
    answer, _ = request(listen, "POST", "/ui/login")
    assert answer.status == 401
    answer, _ = request(listen, "POST", "/ui/login", {"Authorization": f"Bearer {token}"})
    assert answer.status == 204
    set_cookie = answer.getheader("Set-Cookie")
    name, value = set_cookie.split(";")[0].split("=", 1)
    assert name == "sandboxd_serve_ui" and len(value) == 64
    assert token not in value and token.encode().hex() not in value
    assert {"Path=/ui", "HttpOnly", "SameSite=Strict"} <= {p.strip() for p in set_cookie.split(";")}
    answer, _ = request(listen, "POST", "/ui/login", {"Authorization": f"Bearer {token}"})
    assert answer.getheader("Set-Cookie").split(";")[0].split("=", 1)[1] != value  # one each
    cookie = {"Cookie": f"other=1; sandboxd_serve_ui={value}"}

    for path in ("/ui/api/health", "/ui/api/sandboxes", "/ui/api/events?after=0",
                 "/ui/api/flow"):
        answer, body = request(listen, "GET", path, cookie)
        assert answer.status == 200, (path, body)
        json.loads(body)
    _, body = request(listen, "GET", "/ui/api/health", cookie)
    health = json.loads(body)
    assert (health["creating"], health["tearing_down"]) == (0, 0)  # counted while in flight
    _, body = request(listen, "GET", "/ui/api/flow", cookie)
    flow = json.loads(body)
    assert set(flow["acquires"]) == {"reused", "reclaimed", "resumed", "discovered", "created",
                                     "claimed", "restored"}
    assert len(flow["latency"]["counts"]) == len(flow["latency"]["bounds"]) + 1
    assert set(flow["capacity_rejections"]) == {"capacity", "per_user", "wait_timeout",
                                                "queue_full", "min_free_disk"}
    # What the relay turned away is in the Flow too (serve always runs one; no egress proxy
    # outside network mode allowlist).
    assert flow["egress_refusals"] is None
    assert flow["relay_refusals"] == {"missing_token": 0, "wrong_token": 0, "unknown_sandbox": 0,
                                      "upstream_failed": 0, "busy": 0}
    answer, _ = request(page_serve.info["relay"], "GET", "/s/nosuchsandbox/v1/sandbox")
    assert answer.status == 401, answer.status  # no token
    _, body = request(listen, "GET", "/ui/api/flow", cookie)
    refused = json.loads(body)["relay_refusals"]
    assert sum(refused.values()) == 1, refused
    capacity = flow["capacity"]
    assert set(capacity) == {"replicas", "overflow_policy", "burst_limit", "max_per_user",
                             "max_waiting", "waiting", "in_use_here", "fleet_wide",
                             "fleet_reserved", "fleet_error"}
    assert capacity["replicas"] >= 1 and capacity["waiting"] == 0
    assert capacity["overflow_policy"] in {"soft", "wait", "reject", "burst"}
    assert capacity["fleet_reserved"] is None or isinstance(capacity["fleet_reserved"], int)
    _, body = request(listen, "GET", "/ui/api/sandboxes", cookie)
    assert all("last_acquire" in row for row in json.loads(body)["sandboxes"])
    answer, body = request(listen, "GET", "/ui/api/usage", cookie)
    usage = json.loads(body)
    assert answer.status == 200 and usage["available"] is True  # local_docker reads the engine
    assert set(usage) == {"available", "interval_seconds", "swept_at", "not_sampled", "sandboxes"}
    answer, body = request(listen, "GET", "/ui/api/events?after=x", cookie)
    assert answer.status == 400 and b"after" in body

    # A stolen cookie opens no control route: not as a cookie, not as a bearer token.
    for path, method in (("/v1/sandboxes", "GET"), ("/v1/sandboxes/acquire", "POST")):
        for headers in (cookie, {"Authorization": f"Bearer {value}"}):
            answer, _ = request(listen, method, path, headers)
            assert answer.status == 401, (path, headers)

    # Logging out closes the session: its cookie opens nothing after.
    answer, _ = request(listen, "POST", "/ui/logout", cookie)
    assert answer.status == 204 and "Max-Age=0" in answer.getheader("Set-Cookie")
    answer, _ = request(listen, "GET", "/ui/api/health", cookie)
    assert answer.status == 401

    # Log-ins are bounded: after ten wrong ones in a minute (the one without a token above, and
    # nine more), even the right token waits (429).
    for _ in range(9):
        answer, _ = request(listen, "POST", "/ui/login", {"Authorization": "Bearer wrong"})
        assert answer.status == 401
    answer, _ = request(listen, "POST", "/ui/login", {"Authorization": f"Bearer {token}"})
    assert answer.status == 429 and answer.getheader("Retry-After") == "60"
    answer, _ = request(listen, "GET", "/v1/sandboxes", {"Authorization": f"Bearer {token}"})
    assert answer.status == 200  # the control API is not locked out


def read_events(answer, until: str, limit: int = 200) -> list[dict]:
    """Server-Sent Events read off `answer` until one whose data holds `until`."""
    events, current = [], {}
    for _ in range(limit * 4):
        line = answer.fp.readline().decode()
        if line in ("\n", "\r\n"):
            if "data" in current:
                events.append(current)
                if until in current["data"]:
                    return events
            current = {}
        elif ":" in line and not line.startswith(":"):
            name, value = line.rstrip("\n").split(":", 1)
            current[name] = value.lstrip(" ")
    raise AssertionError(f"no event with {until!r} in {events}")


def test_the_event_stream_pushes_each_event_and_resumes_after_last_event_id(page_serve):
    listen, token = page_serve.listen, page_serve.token
    client = page_serve.client(token=token)
    answer, _ = request(listen, "POST", "/ui/login", {"Authorization": f"Bearer {token}"})
    cookie = {"Cookie": answer.getheader("Set-Cookie").split(";")[0]}
    where = urllib.parse.urlsplit(listen)

    def subscribe(headers: dict):
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=20)
        conn.request("GET", "/ui/events", headers=headers)
        return conn, conn.getresponse()

    conn, answer = subscribe({})
    assert answer.status == 401  # no credential, no stream
    conn.close()
    conn, answer = subscribe(cookie)
    assert answer.status == 200
    assert answer.getheader("Content-Type") == "text/event-stream"
    assert "script-src 'self'" in answer.getheader("Content-Security-Policy")
    sandbox = client.acquire("t-1", user_id="alice")
    created = read_events(answer, sandbox.sandbox_id)[-1]
    assert created["event"] == "lifecycle"
    assert json.loads(created["data"])["kind"] == "created"
    client.release(sandbox.sandbox_id)  # pushed on the open stream
    released = read_events(answer, '"released"')[-1]
    assert json.loads(released["data"])["sandbox_id"] == sandbox.sandbox_id
    assert int(released["id"]) > int(created["id"])
    conn.close()

    # A browser that reconnects sends the last id it saw and gets what came after it.
    conn, answer = subscribe({**cookie, "Last-Event-ID": created["id"]})
    first = read_events(answer, "")[0]
    assert first["id"] == released["id"]
    conn.close()
    conn, answer = subscribe({**cookie, "Last-Event-ID": "soon"})
    assert answer.status == 400 and b"Last-Event-ID" in answer.read()
    conn.close()


@pytest.fixture
def provisioner(engine_required, tmp_path, prefix):
    """sandboxd-provisioner on the engine, on 127.0.0.1; its sandboxes removed at the end."""
    binary = os.environ.get("SANDBOXD_PROVISIONER", "")
    if not binary:
        pytest.skip("SANDBOXD_PROVISIONER (the sandboxd-provisioner binary) is not set")
    key = secrets.token_hex(16)
    config = tmp_path / "provisioner.json"
    config.write_text(json.dumps({"provisioner": {
        "listen": "127.0.0.1:0", "api_key": key, "host_base_dir": str(tmp_path / "deer-flow"),
        "backend": {"use": "local_docker:LocalContainerBackend",
                    "socket": f"unix://{os.environ['SANDBOXD_TEST_DOCKER_SOCKET']}",
                    "image": IMAGE, "container_prefix": prefix}}}))
    log = open(tmp_path / "provisioner.log", "wb")
    process = subprocess.Popen([binary, "--config", str(config)], stdout=subprocess.PIPE,
                               stderr=log)
    line = process.stdout.readline().decode()
    assert line.startswith("listening on http://127.0.0.1:"), \
        (tmp_path / "provisioner.log").read_text()[-2000:]
    yield types.SimpleNamespace(listen=line.split()[-1], key=key, process=process)
    for container in engine_containers_named(prefix):
        remove_container(container)
    process.terminate()
    process.wait(timeout=60)
    log.close()


def engine_containers_named(part: str) -> list[str]:
    conn = EngineConnection()
    filters = urllib.parse.quote(json.dumps({"name": [part]}))
    conn.request("GET", f"/containers/json?all=true&filters={filters}")
    return [c["Names"][0].lstrip("/") for c in json.loads(conn.getresponse().read())]


def test_the_provisioner_serves_the_same_page_behind_its_api_key(provisioner, browser):
    listen, key = provisioner.listen, provisioner.key
    api = {"X-API-Key": key, "Content-Type": "application/json"}

    # Its data needs the key (or the page's cookie); a bearer token is the page's log-in only.
    answer, _ = request(listen, "GET", "/ui/api/sandboxes")
    assert answer.status == 401
    answer, _ = request(listen, "GET", "/api/sandboxes", {"Authorization": f"Bearer {key}"})
    assert answer.status == 401
    answer, body = request(listen, "GET", "/ui/api/health", {"X-API-Key": key})
    assert answer.status == 200 and json.loads(body)["running"] == 0
    # The page's session is the provisioner's own cookie, not the key, and opens no /api route.
    answer, _ = request(listen, "POST", "/ui/login", {"Authorization": f"Bearer {key}"})
    assert answer.status == 204
    name, value = answer.getheader("Set-Cookie").split(";")[0].split("=", 1)
    assert name == "sandboxd_provisioner_ui" and key not in value
    session = {"Cookie": f"{name}={value}"}
    assert request(listen, "GET", "/ui/api/health", session)[0].status == 200
    assert request(listen, "GET", "/api/sandboxes", session)[0].status == 401
    assert request(listen, "GET", "/api/sandboxes", {"X-API-Key": value})[0].status == 401
    assert request(listen, "POST", "/ui/logout", session)[0].status == 204
    assert request(listen, "GET", "/ui/api/health", session)[0].status == 401

    where = urllib.parse.urlsplit(listen)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
    conn.request("POST", "/api/sandboxes", json.dumps(
        {"sandbox_id": "a1b2c3d4", "thread_id": "t-1", "user_id": "alice"}), api)
    made = conn.getresponse()
    assert made.status == 200, made.read()
    made.read()

    browser.call("Page.navigate", url=listen + "/ui")
    browser.wait_for("!document.getElementById('login').hidden", "the log-in form")
    browser.evaluate("document.getElementById('credential').focus()")
    browser.call("Input.insertText", text=key)
    browser.evaluate("document.querySelector('#login-form button').click()")
    browser.wait_for("document.querySelectorAll('#sandboxes tr').length === 1", "the sandbox")
    (row,) = rows(browser, "sandboxes")
    assert row["cells"][:4] == ["a1b2c3d4", "running", "alice", "t-1"]
    assert browser.evaluate("document.getElementById('daemon').textContent") == "provisioner"
    browser.wait_for("!!document.querySelector('#events tr[data-kind=created]')",
                     "the creation among the events")
    browser.wait_for("document.getElementById('flow').dataset.availability === 'none'",
                     "that this daemon has no Flow panel (its 404 taken)")
    assert browser.evaluate("document.getElementById('flow').hidden") is True

    # Its own sampler reads what its backend lists: the sandbox's memory and processes.
    answer, body = request(listen, "GET", "/ui/api/usage", {"X-API-Key": key})
    assert answer.status == 200 and json.loads(body)["available"] is True
    row = "document.querySelector('#sandboxes tr[data-sandbox=\"a1b2c3d4\"]')"
    browser.wait_for(f"/iB \\/ [0-9.]+ [KMG]iB$/.test({row}?.querySelector('.memory')?.textContent)",
                     "the sandbox's memory against its limit", timeout=30)
    assert int(browser.evaluate(f"{row}.querySelector('.pids').textContent")) >= 1

    conn.request("DELETE", "/api/sandboxes/a1b2c3d4", headers={"X-API-Key": key})
    gone = conn.getresponse()
    assert gone.status == 200, gone.read()
    gone.read()
    conn.close()
    browser.wait_for("!!document.querySelector('#events tr[data-kind=destroyed]')",
                     "the deletion among the events, without a reload")
    browser.wait_for("document.querySelectorAll('#sandboxes tr').length === 0",
                     "the sandbox gone from the table")
