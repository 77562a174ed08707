"""Issue 34: network mode ``allowlist`` through a real ``sandboxctl serve`` on the engine. The
sandbox has no network of its own: its only way out is serve's egress proxy, which listens inside
its network namespace (HTTP_PROXY names it) and lets through only the names allowed or granted.
The test's upstream is an HTTP server on 127.0.0.7 that a test-only configuration key
(``network.test_only_upstreams``) names; nothing leaves this host. Inside the sandbox, busybox
``wget`` is the client, as any tool honouring HTTP_PROXY would be. DeerFlow's network-policy
calls decide a pending request through sandboxd's DeerFlow provider, and a serve restart keeps
the grants."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import (ENGINE_SOCKET, IMAGE, EngineConnection, containers_left, engine_containers,
                      engine_exec)

import sandboxd
from sandboxd import deerflow as sandboxd_deerflow


class Upstream:
    """An HTTP server on 127.0.0.7: what "allowed.test" and "later.test" resolve to."""

    def __init__(self) -> None:
        seen = self.seen = []
        authorizations = self.authorizations = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                seen.append((self.headers.get("Host"), self.path))
                authorizations.append(self.headers.get("Authorization"))
                body = f"upstream saw {self.headers.get('Host')}{self.path}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.7", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wget(container: str, url: str, *extra: str) -> tuple[int, str]:
    # (busybox wget -T crashes through a proxy: busybox timeout bounds it instead.)
    return engine_exec(container, ["timeout", "10", "wget", "-q", "-O", "-", *extra, url])


def allowlist_section(prefix: str, state, upstream: Upstream) -> dict:
    target = f"127.0.0.7:{upstream.port}"
    return {
        "backend": {"use": "local_docker:LocalContainerBackend",
                    "socket": f"unix://{ENGINE_SOCKET}", "image": IMAGE,
                    "container_prefix": prefix, "memory": "256m", "cpus": 1},
        "network": {"mode": "allowlist", "allow_domains": ["allowed.test"],
                    "approval": "prompt", "temporary_grant_ttl": 60,
                    "test_only_upstreams": {"allowed.test": target, "later.test": target}},
        "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                      "path": str(state / "leases.db")},
        "base_dir": str(state),
    }


@pytest.fixture
def upstream():
    server = Upstream()
    yield server
    server.close()


def test_an_allowlist_sandbox_reaches_only_allowed_names_through_the_proxy(
        engine_required, make_serve, tmp_path, prefix, upstream):
    state = tmp_path / "state"
    served = make_serve("state", "--on-exit", "leave",
                        section=allowlist_section(prefix, state, upstream))
    client = served.client()
    assert client.health()["network_mode"] == "allowlist"
    box = client.acquire("t-1", user_id="alice")
    name = f"{prefix}-{box.sandbox_id}"

    code, out = wget(name, "http://allowed.test/hello?q=1")
    assert code == 0 and out == "upstream saw allowed.test/hello?q=1\n", out
    assert upstream.seen == [("allowed.test", "/hello?q=1")]

    # Not allowed: refused at the proxy, never sent.
    code, out = wget(name, "http://later.test/")
    assert code != 0 and "403" in out, out
    code, out = wget(name, "http://10.0.0.5/")
    assert code != 0 and "403" in out, out
    assert len(upstream.seen) == 1
    # No way around the proxy: no network at all but the sandbox's own loopback.
    code, out = wget(name, f"http://127.0.0.7:{upstream.port}/direct", "-Y", "off")
    assert code != 0, out
    code, out = engine_exec(name, ["cat", "/proc/net/dev"])
    assert "eth0" not in out, out
    # The sandbox's /etc/hosts is its own business: the proxy resolves names itself.
    engine_exec(name, ["sh", "-c", "echo '10.0.0.5 allowed.test' >> /etc/hosts"])
    code, out = wget(name, "http://allowed.test/after-hosts")
    assert code == 0 and "after-hosts" in out, out

    # DeerFlow's calls through sandboxd's provider: the refused name is a pending request.
    provider = sandboxd_deerflow.SandboxdProvider(client=client)
    assert provider.sandbox_network_mode() == "allowlist"
    events = provider.consume_network_policy_events(box.sandbox_id)
    assert [(e["host"], e["port"], e["method"]) for e in events] == [("later.test", 80, "GET")]
    assert provider.consume_network_policy_events(box.sandbox_id) == [], "handed out twice"
    assert provider.decide_network_policy_request(box.sandbox_id, events[0]["request_id"],
                                                  "allow_sandbox")
    code, out = wget(name, "http://later.test/granted")
    assert code == 0 and "later.test/granted" in out, out
    view = client.egress(box.sandbox_id)
    assert view["allow_domains"] == ["allowed.test"]
    # What the decision on `GET later.test` granted: that name at port 80, for this sandbox.
    assert view["grants"] == [{"domain": "later.test", "port": 80, "expires": None}]
    metrics = client.metrics()
    assert 'sandboxd_egress_refused_total{reason="domain_not_allowed"} 1' in metrics, metrics
    assert 'sandboxd_egress_refused_total{reason="ip_literal"} 1' in metrics
    assert 'sandboxd_egress_total{kind="plain"} 3' in metrics

    # A restart keeps the sandbox's way out and its grants.
    assert served.stop() == 0
    again = make_serve("state", "--on-exit", "destroy",
                       section=allowlist_section(prefix, state, upstream))
    code, out = wget(name, "http://later.test/after-restart")
    assert code == 0 and "after-restart" in out, out

    # The operator's door: sandboxctl egress, through the serve that runs the proxy.
    import subprocess
    from conftest import SANDBOXCTL

    def egress(*words: str) -> subprocess.CompletedProcess:
        return subprocess.run([SANDBOXCTL, "--config", str(again.config), "egress",
                               box.sandbox_id, *words], capture_output=True, text=True,
                              timeout=60)
    shown = egress("--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["grants"] == [{"domain": "later.test", "port": 80,
                                                   "expires": None}]
    assert egress("deny", "later.test").returncode == 0
    code, out = wget(name, "http://later.test/denied-again")
    assert code != 0 and "403" in out, out
    listed = egress()
    assert "pending:" in listed.stdout and "GET later.test:80" in listed.stdout, listed.stdout
    assert egress("decide", "0000000000000000", "allow_sandbox").returncode == 5
    again.client().destroy(box.sandbox_id)


def test_grants_are_one_sandboxs_and_its_way_out_follows_a_restart_of_its_container(
        engine_required, make_serve, tmp_path, prefix, upstream):
    """Issue 44: a restarted container has a new network namespace; serve's sync pass makes the
    proxy listener again there (before, allowed names and grants were unreachable until serve
    restarted, and the old listener kept the old namespace alive). Grants belong to one instance
    of a sandbox: destroyed and made again for the same conversation, it starts with none; and
    `--on-exit destroy` takes them out of the grants file (before, the next serve restored them
    onto the re-created sandbox)."""
    state = tmp_path / "state"
    section = allowlist_section(prefix, state, upstream)
    served = make_serve("state", "--on-exit", "destroy", section=section)
    client = served.client()
    box = client.acquire("t-1", user_id="alice")
    name = f"{prefix}-{box.sandbox_id}"
    client.decide_network_domain(box.sandbox_id, "later.test", "allow_sandbox")
    code, out = wget(name, "http://later.test/granted")
    assert code == 0 and "later.test/granted" in out, out

    if os.environ.get("SANDBOXD_TEST_ENGINE") == "docker":
        # podman 4.3 removes an AutoRemove container at a restart: only Docker restarts one.
        conn = EngineConnection(timeout=60)
        conn.request("POST", f"/containers/{name}/restart?t=1")
        assert conn.getresponse().status == 204
        deadline = time.monotonic() + 10
        while True:
            code, out = wget(name, "http://later.test/after-engine-restart")
            if code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert code == 0 and "after-engine-restart" in out, f"no way out after a restart: {out}"
        assert "new network namespace" in (state / "serve.log").read_text()

    # Destroyed and made again: the same id, a new instance, no grant.
    client.destroy(box.sandbox_id)
    again = client.acquire("t-1", user_id="alice")
    assert again.sandbox_id == box.sandbox_id
    assert client.egress(again.sandbox_id)["grants"] == []
    code, out = wget(name, "http://later.test/inherited")
    assert code != 0 and "403" in out, f"the new sandbox inherited the old one's grant: {out}"
    client.decide_network_domain(again.sandbox_id, "later.test", "allow_sandbox")
    grants_file = state / "egress-grants.json"
    assert again.sandbox_id in grants_file.read_text()
    assert served.stop() == 0  # --on-exit destroy
    assert again.sandbox_id not in grants_file.read_text(), grants_file.read_text()


def test_the_one_shot_cli_refuses_allowlist_naming_serve(engine_required, tmp_path, prefix,
                                                         upstream):
    import subprocess
    from conftest import SANDBOXCTL, engine_containers
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = tmp_path / "allowlist.json"
    config.write_text(json.dumps({"sandbox": allowlist_section(prefix, state, upstream)}))
    done = subprocess.run([SANDBOXCTL, "--config", str(config), "acquire", "--user", "alice",
                           "--thread", "t-1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert "sandboxctl serve" in done.stderr
    # Its own sentence (before: the isolated mode's).
    assert "network mode allowlist" in done.stderr and "proxy" in done.stderr, done.stderr
    assert "without a host address" not in done.stderr, done.stderr
    assert engine_containers(prefix) == []

    # check-config shows the allowed names and warns that the test-only key is set.
    shown = subprocess.run([SANDBOXCTL, "--config", str(config), "check-config"],
                           capture_output=True, text=True, timeout=60)
    assert "egress allowed to: allowed.test" in shown.stdout, shown.stdout + shown.stderr
    assert "test_only_upstreams is set: FOR TESTS ONLY" in shown.stdout, shown.stdout


SECRET = "ghp_s3cr3t-never-in-the-sandbox"


def test_a_secret_reaches_only_its_destination_header_and_never_the_sandbox(
        engine_required, make_serve, tmp_path, prefix, upstream):
    state = tmp_path / "state"
    secret_file = tmp_path / "gh-token"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    section = allowlist_section(prefix, state, upstream)
    section["network"]["secrets"] = [{
        "name": "GITHUB_TOKEN", "secret_file": str(secret_file),
        "inject": {"host": "allowed.test", "header": "Authorization", "format": "Bearer {}",
                   "scheme": "http"}}]
    served = make_serve("state", "--on-exit", "leave", section=section)
    client = served.client()
    box = client.acquire("t-1", user_id="alice")
    name = f"{prefix}-{box.sandbox_id}"

    # check-config names the secret and its destination, never its value.
    import subprocess
    from conftest import SANDBOXCTL
    shown = subprocess.run([SANDBOXCTL, "--config", str(served.config), "check-config"],
                           capture_output=True, text=True, timeout=60)
    assert "GITHUB_TOKEN → Authorization to http://allowed.test" in shown.stdout, shown.stdout
    assert SECRET not in shown.stdout + shown.stderr

    # The sandbox holds a placeholder, never the secret.
    code, out = engine_exec(name, ["sh", "-c", "echo $GITHUB_TOKEN"])
    placeholder = out.strip()
    assert code == 0 and placeholder.startswith("sandboxd-placeholder-"), out
    code, out = engine_exec(name, ["env"])
    assert SECRET not in out

    # To its host, in its header: the secret, formatted. Both spellings a client would use.
    for header in (f"Authorization: {placeholder}", f"Authorization: Bearer {placeholder}"):
        code, out = wget(name, "http://allowed.test/api", "--header", header)
        assert code == 0, out
        assert upstream.authorizations[-1] == f"Bearer {SECRET}", upstream.authorizations
    # In another header, or to another host (granted for this test): the placeholder as sent.
    code, out = wget(name, "http://allowed.test/other", "--header", f"X-Token: {placeholder}")
    assert code == 0 and upstream.authorizations[-1] is None, out
    client.decide_network_domain(box.sandbox_id, "later.test", "allow_sandbox")
    code, out = wget(name, "http://later.test/elsewhere", "--header",
                     f"Authorization: Bearer {placeholder}")
    assert code == 0, out
    assert upstream.authorizations[-1] == f"Bearer {placeholder}", upstream.authorizations
    assert "sandboxd_egress_secrets_injected_total 2" in client.metrics()

    # The same placeholder after a restart (sandboxes made before keep working), and the secret
    # is nowhere in the state directory (serve's log included).
    assert served.stop() == 0
    again = make_serve("state", "--on-exit", "destroy", section=section)
    code, out = wget(name, "http://allowed.test/after", "--header",
                     f"Authorization: {placeholder}")
    assert code == 0 and upstream.authorizations[-1] == f"Bearer {SECRET}", out
    for path in state.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"the secret is in {path}"
    again.client().destroy(box.sandbox_id)


def openssl(*args: str) -> None:
    import subprocess
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def make_ca(directory, name: str):
    """A CA made the way docs/egress.md tells an operator to make one."""
    certificate, key = directory / f"{name}.pem", directory / f"{name}.key"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(certificate), "-days", "2", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    key.chmod(0o600)
    return certificate, key


class TlsUpstream(Upstream):
    """The upstream over TLS, with a certificate for allowed.test from its own CA."""

    def __init__(self, directory) -> None:
        import ssl
        super().__init__()
        ca, ca_key = make_ca(directory, "upstream-ca")
        self.ca = ca
        key, request, certificate = (directory / f"allowed.{ext}" for ext in ("key", "csr", "pem"))
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(key), "-out", str(request), "-subj", "/CN=allowed.test")
        extensions = directory / "allowed.ext"
        extensions.write_text("subjectAltName=DNS:allowed.test\n")
        openssl("x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key),
                "-CAcreateserial", "-days", "2", "-out", str(certificate),
                "-extfile", str(extensions))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(certificate), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)


def container_pid(name: str) -> int:
    conn = EngineConnection(timeout=60)
    conn.request("GET", f"/containers/{name}/json")
    return json.loads(conn.getresponse().read())["State"]["Pid"]


def test_an_https_secret_goes_in_through_tls_the_proxy_ends_with_the_operators_ca(
        engine_required, make_serve, tmp_path, prefix):
    """inject_tls_ca: the proxy ends the sandbox's TLS to a secret's https destination with a
    certificate from the operator's CA (made with openssl, as docs/egress.md says), verifies the
    destination itself, and puts the secret in. A client in the sandbox's own network namespace
    that trusts the CA (curl --cacert) sees a valid certificate; one trusting only the system's
    store refuses it."""
    import subprocess
    from conftest import SANDBOXCTL
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o700)
    upstream = TlsUpstream(secrets_dir)
    try:
        ca, ca_key = make_ca(secrets_dir, "egress-ca")
        secret_file = secrets_dir / "gh-token"
        secret_file.write_text(SECRET + "\n")
        secret_file.chmod(0o600)
        section = allowlist_section(prefix, tmp_path / "state", upstream)
        section["network"]["inject_tls_ca"] = {"certificate_file": str(ca),
                                               "key_file": str(ca_key)}
        section["network"]["upstream_ca_file"] = str(upstream.ca)
        section["network"]["secrets"] = [{
            "name": "GITHUB_TOKEN", "secret_file": str(secret_file),
            "inject": {"host": "allowed.test", "header": "Authorization",
                       "format": "Bearer {}"}}]
        served = make_serve("state", "--on-exit", "destroy", section=section)
        shown = subprocess.run([SANDBOXCTL, "--config", str(served.config), "check-config"],
                               capture_output=True, text=True, timeout=60)
        assert "GITHUB_TOKEN → Authorization to https://allowed.test" in shown.stdout, shown.stdout
        assert f"signed by the CA in {ca}" in shown.stdout, shown.stdout
        client = served.client()
        box = client.acquire("t-1", user_id="alice")
        name = f"{prefix}-{box.sandbox_id}"
        code, out = engine_exec(name, ["sh", "-c", "echo $GITHUB_TOKEN"])
        placeholder = out.strip()
        assert code == 0 and placeholder.startswith("sandboxd-placeholder-"), out

        # curl in the sandbox's own network namespace (busybox wget does not CONNECT for
        # https): the certificate is valid with the operator's CA, and not without it.
        pid = container_pid(name)
        def curl(*extra: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                ["nsenter", f"--net=/proc/{pid}/ns/net", "curl", "-sS", "--max-time", "10",
                 "-x", "http://127.0.0.1:3128", "-H", f"Authorization: Bearer {placeholder}",
                 *extra, "https://allowed.test/curl"], capture_output=True, text=True, timeout=30)
        verified = curl("--cacert", str(ca))
        assert verified.returncode == 0, verified.stderr
        assert "upstream saw allowed.test/curl" in verified.stdout
        assert upstream.authorizations[-1] == f"Bearer {SECRET}", upstream.authorizations
        unverified = curl()
        assert unverified.returncode != 0, unverified.stdout
        assert len(upstream.seen) == 1, upstream.seen
        metrics = client.metrics()
        assert "sandboxd_egress_secrets_injected_total 1" in metrics, metrics
        assert "sandboxd_egress_intercepted_total 1" in metrics, metrics
        client.destroy(box.sandbox_id)
    finally:
        upstream.close()


def test_secrets_are_refused_at_config_time_for_https_and_unsafe_files(
        engine_required, make_serve, tmp_path, prefix, upstream):
    import subprocess
    from conftest import SANDBOXCTL
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    secret_file = tmp_path / "token"
    secret_file.write_text(SECRET)
    secret_file.chmod(0o600)

    def serve_with(inject: dict, file=secret_file) -> subprocess.CompletedProcess:
        section = allowlist_section(prefix, state, upstream)
        section["network"]["secrets"] = [{"name": "TOKEN", "secret_file": str(file),
                                          "inject": inject}]
        config = tmp_path / "secrets.json"
        config.write_text(json.dumps({"sandbox": section}))
        return subprocess.run([SANDBOXCTL, "--config", str(config), "serve", "--listen",
                               f"unix:{tmp_path / 'serve.sock'}"], capture_output=True,
                              text=True, timeout=60)

    https = serve_with({"host": "allowed.test", "header": "Authorization"})
    assert https.returncode == 3, https.stderr
    assert "secrets[0].inject.scheme" in https.stderr and "inject_tls_ca" in https.stderr, \
        https.stderr
    secret_file.chmod(0o644)
    readable = serve_with({"host": "allowed.test", "header": "Authorization", "scheme": "http"})
    assert readable.returncode == 3 and "chmod 600" in readable.stderr, readable.stderr
    assert SECRET not in readable.stderr
    secret_file.chmod(0o600)
    elsewhere = serve_with({"host": "other.test", "header": "Authorization", "scheme": "http"})
    assert elsewhere.returncode == 3 and "not in allow_domains" in elsewhere.stderr
    assert engine_containers(prefix) == []


class Provisioner:
    """sandboxd-provisioner on the engine in network mode allowlist (prompt), on 127.0.0.1."""

    KEY = "k" * 32

    def __init__(self, tmp_path, prefix: str, upstream: Upstream) -> None:
        import os
        import subprocess
        binary = os.environ.get("SANDBOXD_PROVISIONER", "")
        if not binary:
            pytest.skip("SANDBOXD_PROVISIONER (the sandboxd-provisioner binary) is not set")
        self.relay_dir = tmp_path / "relay"
        target = f"127.0.0.7:{upstream.port}"
        config = tmp_path / "provisioner.json"
        config.write_text(json.dumps({"provisioner": {
            "listen": "127.0.0.1:0", "api_key": self.KEY,
            "host_base_dir": str(tmp_path / "state"),
            "relay_state_dir": str(self.relay_dir), "relay_listen": "127.0.0.1:0",
            "backend": {"use": "local_docker:LocalContainerBackend",
                        "socket": f"unix://{ENGINE_SOCKET}", "image": IMAGE,
                        "container_prefix": prefix, "memory": "256m", "cpus": 1,
                        "network": {"mode": "allowlist", "allow_domains": ["allowed.test"],
                                    "approval": "prompt",
                                    "test_only_upstreams": {"allowed.test": target,
                                                            "later.test": target}}}}}))
        self.process = subprocess.Popen([binary, "--config", str(config)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        line = self.process.stdout.readline()
        if not line.startswith("listening on http://127.0.0.1:"):
            self.stop()
            raise AssertionError((line, self.process.stderr.read()))
        self.base = line.split()[-1]

    def call(self, method: str, path: str, body: dict | None = None,
             api_key: str = KEY) -> tuple[int, dict]:
        import urllib.error
        import urllib.request
        request = urllib.request.Request(
            self.base + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"X-API-Key": api_key, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            text = error.read()
            try:
                return error.code, json.loads(text)
            except ValueError:  # the 401 is plain text
                return error.code, {"text": text.decode(errors="replace")}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def test_the_provisioner_runs_allowlist_sandboxes_and_takes_decisions(
        engine_required, tmp_path, prefix, upstream):
    """sandboxd-provisioner in network mode allowlist: its sandboxes' only way out is its egress
    proxy, refused names are pending requests decided through its /api/sandboxes/{id}/egress
    routes (behind its API key), and a removed sandbox's listener and grants go with it."""
    provisioner = Provisioner(tmp_path, prefix, upstream)
    call = provisioner.call
    try:
        sandbox_id = "0123456789abcdef"
        status, made = call("POST", "/api/sandboxes",
                            {"sandbox_id": sandbox_id, "thread_id": "t-1", "user_id": "alice"})
        assert status == 200, made
        name = f"{prefix}-{sandbox_id}"
        code, out = wget(name, "http://allowed.test/via-provisioner")
        assert code == 0 and "allowed.test/via-provisioner" in out, out
        code, out = wget(name, "http://later.test/")
        assert code != 0 and "403" in out, out

        assert call("GET", f"/api/sandboxes/{sandbox_id}/egress", api_key="wrong")[0] == 401
        status, view = call("GET", f"/api/sandboxes/{sandbox_id}/egress")
        assert status == 200 and view["allow_domains"] == ["allowed.test"], view
        status, events = call("POST", f"/api/sandboxes/{sandbox_id}/egress/events")
        assert status == 200, events
        pending = events["events"]
        assert [(e["host"], e["port"]) for e in pending] == [("later.test", 80)], events
        status, decided = call("POST", f"/api/sandboxes/{sandbox_id}/egress/decide",
                               {"request_id": pending[0]["request_id"],
                                "decision": "allow_sandbox"})
        assert status == 200 and decided["ok"], decided
        code, out = wget(name, "http://later.test/granted")
        assert code == 0 and "later.test/granted" in out, out
        status, bad = call("POST", f"/api/sandboxes/{sandbox_id}/egress/decide",
                           {"decision": "maybe", "domain": "later.test"})
        assert status == 400 and "decision" in bad["detail"], bad
        status, missing = call("GET", "/api/sandboxes/fedcba9876543210/egress")
        assert status == 404, missing

        assert call("DELETE", f"/api/sandboxes/{sandbox_id}")[0] == 200
        assert call("GET", f"/api/sandboxes/{sandbox_id}/egress")[0] == 404
        grants = json.loads((provisioner.relay_dir / "egress-grants.json").read_text())
        assert sandbox_id not in json.dumps(grants), grants
    finally:
        provisioner.stop()
    assert containers_left(prefix) == []


def test_a_gateway_serve_over_the_provisioner_forwards_egress_decisions(
        engine_required, make_serve, tmp_path, prefix, upstream):
    """A gateway's serve whose sandboxes come from sandboxd-provisioner (remote_provisioner):
    its own /v1/sandboxes/{id}/egress routes, and so the Python client, sandboxctl egress and
    DeerFlow's provider calls, reach the provisioner's proxy; the provisioner's refusals come
    back in serve's words."""
    import subprocess
    from conftest import SANDBOXCTL
    provisioner = Provisioner(tmp_path, prefix, upstream)
    try:
        served = make_serve("gateway", "--on-exit", "destroy", section={
            "backend": {"use": "remote_provisioner:RemoteSandboxBackend",
                        "provisioner_url": provisioner.base,
                        "provisioner_api_key": Provisioner.KEY},
            "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                          "path": str(tmp_path / "gateway" / "leases.db")},
            # DeerFlow's layout: the gateway and the provisioner share the state directory.
            "base_dir": str(tmp_path / "state")})
        client = served.client()
        box = client.acquire("t-1", user_id="alice")
        name = f"{prefix}-{box.sandbox_id}"
        code, out = wget(name, "http://later.test/")
        assert code != 0 and "403" in out, out

        view = client.egress(box.sandbox_id)
        assert view["allow_domains"] == ["allowed.test"], view
        events = client.consume_network_policy_events(box.sandbox_id)
        assert [(e["host"], e["port"]) for e in events] == [("later.test", 80)], events
        assert client.consume_network_policy_events(box.sandbox_id) == [], "handed out twice"
        assert client.decide_network_policy_request(box.sandbox_id, events[0]["request_id"],
                                                    "allow_sandbox")
        code, out = wget(name, "http://later.test/granted-through-the-gateway")
        assert code == 0 and "later.test/granted-through-the-gateway" in out, out

        # sandboxctl egress against the gateway serve: the grant is listed.
        listed = subprocess.run([SANDBOXCTL, "egress", box.sandbox_id, "--json",
                                 "--serve", served.listen], capture_output=True, text=True,
                                timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert "later.test" in json.dumps(json.loads(listed.stdout)["grants"]), listed.stdout
        # The provisioner's refusal of a bad decision, as serve's invalid_argument.
        with pytest.raises(sandboxd.SandboxdError) as refused:
            client.decide_network_domain(box.sandbox_id, "later.test", "maybe")
        assert "decision" in str(refused.value), refused.value
        client.destroy(box.sandbox_id)
    finally:
        provisioner.stop()
    assert containers_left(prefix) == []
