"""Issue 24: the kubernetes backend (kubernetes:KubernetesBackend) driven through sandboxctl,
each command its own process, against the stand-in API server with --serve-pods (a NodePort
service is backed by a real httpd on 127.0.0.1, so the core's readiness probe and the sandbox
URL reach something real). What the plugin made is read back with kubectl and the official
Python client, never with our own code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import TOKEN, kubectls

SANDBOXCTL = os.environ.get("SANDBOXCTL", "")
PROVISIONER = os.environ.get("SANDBOXD_PROVISIONER", "")
NAMESPACE = "sandboxes"
ALICE_T1 = "204d8a9dc81c839f"  # the deterministic id of (alice, t-1), design §4.1

pytestmark = pytest.mark.skipif(not SANDBOXCTL, reason="needs SANDBOXCTL (ctest sets it)")


def config_for(standin, **backend) -> str:
    (standin.directory / "state").mkdir(exist_ok=True)
    path = standin.directory / "sandboxd.json"
    path.write_text(json.dumps({"sandbox": {
        "backend": {"use": "kubernetes:KubernetesBackend", "kubeconfig": str(standin.kubeconfig),
                    "node_host": "127.0.0.1", "image": "all-in-one", "ready_timeout_seconds": 30,
                    **backend},
        "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                      "path": str(standin.directory / "state" / "leases.db")},
        "base_dir": str(standin.directory / "state")}}))
    return str(path)


def sandboxctl(config: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([SANDBOXCTL, "--config", config, *args], capture_output=True, text=True,
                          timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"sandboxctl {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def value(output: str, key: str) -> str:
    for line in output.splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {key} in {output!r}")


def python_api(standin):
    k8s = pytest.importorskip("kubernetes")
    return k8s.client.CoreV1Api(k8s.config.new_client_from_config(str(standin.kubeconfig)))


def test_a_sandbox_is_a_secure_pod_with_an_owned_service_read_back_by_the_real_clients(
        serving_standin):
    config = config_for(serving_standin)
    out = sandboxctl(config, "acquire", "--user", "alice", "--thread", "t-1").stdout
    assert (value(out, "sandbox_id"), value(out, "path")) == (ALICE_T1, "created")
    url = value(out, "sandbox_url")
    assert url.startswith("http://127.0.0.1:3")
    with urllib.request.urlopen(url + "/v1/sandbox", timeout=5) as answer:
        assert answer.status == 200

    v1 = python_api(serving_standin)
    pod = v1.read_namespaced_pod(f"sandbox-{ALICE_T1}", NAMESPACE)
    assert pod.metadata.labels["app"] == "deer-flow-sandbox"
    assert pod.metadata.labels["sandbox-id"] == ALICE_T1
    assert pod.metadata.annotations == {"sandboxd.io/user-id": "alice", "sandboxd.io/thread-id": "t-1"}
    assert pod.spec.automount_service_account_token is False
    assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    container = pod.spec.containers[0]
    assert container.security_context.allow_privilege_escalation is False
    assert container.security_context.capabilities.drop == ["ALL"]
    # What the Pod Security Standards' baseline profile lets a pod add (README says it is met).
    baseline = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
    assert set(container.security_context.capabilities.add) <= baseline
    assert not pod.spec.host_network and not pod.spec.host_pid and not pod.spec.host_ipc
    assert not container.security_context.privileged
    assert (container.resources.requests, container.resources.limits) == (
        {"cpu": "100m", "memory": "256Mi"}, {"cpu": "1", "memory": "1Gi"})
    service = v1.read_namespaced_service(f"sandbox-{ALICE_T1}-svc", NAMESPACE)
    assert service.spec.type == "NodePort"
    assert url.endswith(f":{service.spec.ports[0].node_port}")
    assert [(o.kind, o.name, o.uid) for o in service.metadata.owner_references] == [
        ("Pod", f"sandbox-{ALICE_T1}", pod.metadata.uid)]
    for kubectl in kubectls():
        shown = subprocess.run(
            [kubectl, "--kubeconfig", str(serving_standin.kubeconfig), "get", "pods", "-l",
             f"sandbox-id={ALICE_T1}", "-o", "jsonpath={.items[*].metadata.name}"],
            capture_output=True, text=True, timeout=60)
        assert shown.stdout == f"sandbox-{ALICE_T1}", (kubectl, shown.stderr)

    # Another process: the conversation's sandbox is found, not made again.
    sandboxctl(config, "release", ALICE_T1)
    again = sandboxctl(config, "acquire", "--user", "alice", "--thread", "t-1").stdout
    assert value(again, "path") in ("reclaimed", "reused", "discovered")
    assert value(again, "sandbox_url") == url
    assert "alice/t-1" in sandboxctl(config, "list").stdout

    sandboxctl(config, "destroy", ALICE_T1)
    assert v1.list_namespaced_pod(NAMESPACE).items == []
    assert v1.list_namespaced_service(NAMESPACE).items == [], "the owned service was left"


def test_network_mode_isolated_makes_a_network_policy_the_pod_owns(serving_standin):
    """Issue 33: DeerFlow's `sandbox.network.mode: isolated`, at the sandbox level of our JSON.
    Each sandbox gets a NetworkPolicy (networking.k8s.io/v1) selecting its pod: ingress to its
    port only from pods labelled sandboxd.io/role=relay, no egress. It is owned by the pod, so
    the cluster collects it with it, and the destroy deletes it too. Read back by kubectl and by
    the official Python client. Whether it is enforced is the cluster CNI's business."""
    config = config_for(serving_standin)
    document = json.loads(Path(config).read_text())
    document["sandbox"]["network"] = {"mode": "isolated", "proxy_image": "ignored"}
    Path(config).write_text(json.dumps(document))
    out = sandboxctl(config, "acquire", "--user", "alice", "--thread", "t-1").stdout
    assert value(out, "sandbox_id") == ALICE_T1

    k8s = pytest.importorskip("kubernetes")
    api_client = k8s.config.new_client_from_config(str(serving_standin.kubeconfig))
    pod = k8s.client.CoreV1Api(api_client).read_namespaced_pod(f"sandbox-{ALICE_T1}", NAMESPACE)
    assert pod.metadata.labels["sandboxd.io/network-policy"] == "isolated"
    policy = k8s.client.NetworkingV1Api(api_client).read_namespaced_network_policy(
        f"sandbox-{ALICE_T1}-netpol", NAMESPACE)
    assert policy.spec.pod_selector.match_labels == {"sandbox-id": ALICE_T1}
    assert policy.spec.policy_types == ["Ingress", "Egress"]
    assert policy.spec.egress == [] or policy.spec.egress is None
    [rule] = policy.spec.ingress
    assert [peer.pod_selector.match_labels for peer in rule._from] == [
        {"sandboxd.io/role": "relay"}]
    assert [(port.protocol, port.port) for port in rule.ports] == [("TCP", 8080)]
    assert [(o.kind, o.name, o.uid) for o in policy.metadata.owner_references] == [
        ("Pod", f"sandbox-{ALICE_T1}", pod.metadata.uid)]
    for kubectl in kubectls():
        shown = subprocess.run(
            [kubectl, "--kubeconfig", str(serving_standin.kubeconfig), "get", "networkpolicies",
             "-n", NAMESPACE, "-o", "json"], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, (kubectl, shown.stderr)
        [item] = json.loads(shown.stdout)["items"]
        assert item["spec"]["podSelector"]["matchLabels"] == {"sandbox-id": ALICE_T1}, kubectl

    # A sandbox made open is not reused under isolated, nor the other way round: the recorded
    # policy differs, so it is replaced. Here: the same conversation under open again.
    document["sandbox"]["network"] = {"mode": "open"}
    Path(config).write_text(json.dumps(document))
    sandboxctl(config, "release", ALICE_T1)
    again = sandboxctl(config, "acquire", "--user", "alice", "--thread", "t-1").stdout
    assert value(again, "path") == "created", again
    pod = k8s.client.CoreV1Api(api_client).read_namespaced_pod(f"sandbox-{ALICE_T1}", NAMESPACE)
    assert pod.metadata.labels["sandboxd.io/network-policy"] == "open"
    networking = k8s.client.NetworkingV1Api(api_client)
    assert networking.list_namespaced_network_policy(NAMESPACE).items == [], \
        "the isolated pod's policy outlived it"
    sandboxd_done = sandboxctl(config, "destroy", ALICE_T1)
    assert sandboxd_done.returncode == 0

    # allowlist is refused, naming the key: the egress proxy serves local_docker only.
    document["sandbox"]["network"] = {"mode": "allowlist"}
    Path(config).write_text(json.dumps(document))
    refused = sandboxctl(config, "acquire", "--user", "alice", "--thread", "t-1", check=False)
    assert refused.returncode == 3, refused.stderr
    assert "network.mode" in refused.stderr and "not offered by the kubernetes" in refused.stderr


def test_a_conversation_back_while_its_old_pod_terminates_gets_a_new_pod(
        serving_terminating_standin):
    """The idle reaper (or `destroy`) deleted the conversation's pod; the cluster keeps it,
    terminating, until its kubelet has stopped it. The user comes back meanwhile: the sandbox
    id is the same, so the name is taken. The acquire waits for the name and makes a new pod
    with its own Service, instead of handing out the dying one."""
    v1 = python_api(serving_terminating_standin)
    config = config_for(serving_terminating_standin)
    sandboxctl(config, "acquire", "--user", "alice", "--thread", "t-1")
    old = v1.read_namespaced_pod(f"sandbox-{ALICE_T1}", NAMESPACE).metadata.uid
    sandboxctl(config, "destroy", ALICE_T1)
    assert v1.read_namespaced_pod(f"sandbox-{ALICE_T1}", NAMESPACE).metadata.deletion_timestamp

    again = sandboxctl(config, "--log-level", "info", "acquire", "--user", "alice", "--thread", "t-1")
    assert (value(again.stdout, "sandbox_id"), value(again.stdout, "path")) == (ALICE_T1, "created")
    assert f"sandbox-{ALICE_T1} is terminating" in again.stderr
    pod = v1.read_namespaced_pod(f"sandbox-{ALICE_T1}", NAMESPACE)
    assert pod.metadata.uid != old and pod.metadata.deletion_timestamp is None
    service = v1.read_namespaced_service(f"sandbox-{ALICE_T1}-svc", NAMESPACE)
    assert [o.uid for o in service.metadata.owner_references] == [pod.metadata.uid]
    with urllib.request.urlopen(value(again.stdout, "sandbox_url") + "/v1/sandbox",
                                timeout=5) as answer:
        assert answer.status == 200
    sandboxctl(config, "destroy", ALICE_T1)


def test_a_pod_deerflows_provisioner_made_is_the_same_sandbox_and_another_users_is_refused(
        serving_standin):
    k8s = pytest.importorskip("kubernetes")
    v1 = python_api(serving_standin)
    config = config_for(serving_standin)

    def pod(annotations: dict | None) -> object:
        return k8s.client.V1Pod(
            metadata=k8s.client.V1ObjectMeta(
                name=f"sandbox-{ALICE_T1}", annotations=annotations,
                labels={"app": "deer-flow-sandbox", "sandbox-id": ALICE_T1}),
            spec=k8s.client.V1PodSpec(containers=[k8s.client.V1Container(name="s", image="x")]))

    v1.create_namespaced_pod(NAMESPACE, pod({"sandboxd.io/user-id": "bob"}))
    refused = sandboxctl(config, "acquire", "--user", "alice", "--thread", "t-1", check=False)
    assert refused.returncode != 0
    assert "exists for another conversation" in refused.stderr
    assert v1.read_namespaced_pod(f"sandbox-{ALICE_T1}", NAMESPACE).metadata.annotations == {
        "sandboxd.io/user-id": "bob"}, "someone else's pod was touched"

    v1.delete_namespaced_pod(f"sandbox-{ALICE_T1}", NAMESPACE)
    v1.create_namespaced_pod(NAMESPACE, pod(None))  # as DeerFlow's provisioner makes them
    taken = sandboxctl(config, "acquire", "--user", "alice", "--thread", "t-1").stdout
    assert value(taken, "sandbox_id") == ALICE_T1
    sandboxctl(config, "destroy", ALICE_T1)


def test_a_quota_refusal_is_a_capacity_refusal(serving_standin):
    config = config_for(serving_standin)
    serving_standin.control("POST", "/_standin/quota", {"pods": 0})
    refused = sandboxctl(config, "acquire", "--user", "alice", "--thread", "t-1", check=False)
    assert refused.returncode == 7, refused.stderr
    assert "exceeded quota" in refused.stderr


@pytest.mark.parametrize("drive,reason", [
    ({"waiting": "ImagePullBackOff", "message": 'Back-off pulling image "all-in-one"'},
     'ImagePullBackOff: Back-off pulling image "all-in-one"'),
    ({"phase": "Running", "waiting": "CrashLoopBackOff", "message": "back-off 10s restarting",
      "restarts": 3}, "CrashLoopBackOff: back-off 10s restarting"),
    ({"unschedulable": "0/3 nodes are available: 3 Insufficient memory."},
     "Unschedulable: 0/3 nodes are available: 3 Insufficient memory."),
])
def test_a_pod_that_cannot_start_fails_fast_naming_why_and_leaves_nothing(
        serving_pending_standin, drive, reason):
    # With a ready_timeout far beyond the test's bound, only the fail-fast path can end the
    # acquire in time, and only it names the reason (a timeout says "was not Ready within").
    config = config_for(serving_pending_standin, ready_timeout_seconds=600)
    acquire = subprocess.Popen([SANDBOXCTL, "--config", config, "acquire", "--user", "alice",
                                "--thread", "t-1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    v1 = python_api(serving_pending_standin)
    deadline = time.monotonic() + 20
    while not v1.list_namespaced_pod(NAMESPACE).items:
        assert time.monotonic() < deadline, "the backend never created its pod"
        time.sleep(0.05)
    serving_pending_standin.control("POST", f"/_standin/pods/{NAMESPACE}/sandbox-{ALICE_T1}", drive)
    _, err = acquire.communicate(timeout=120)
    assert acquire.returncode != 0
    assert reason in err, err
    assert v1.list_namespaced_pod(NAMESPACE).items == []
    assert v1.list_namespaced_service(NAMESPACE).items == []


def test_a_rotated_token_file_is_read_again_without_a_restart(serving_standin):
    token_file = serving_standin.directory / "token"
    token_file.write_text(TOKEN + "\n")
    text = serving_standin.kubeconfig.read_text().replace(f"token: {TOKEN}", f"tokenFile: {token_file}")
    serving_standin.kubeconfig.write_text(text)
    config = config_for(serving_standin)
    served = subprocess.Popen([SANDBOXCTL, "--config", config, "serve", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        document = ""
        while not document.rstrip().endswith("}"):
            line = served.stdout.readline()
            assert line, served.stderr.read()
            document += line
        socket_path = json.loads(document)["listen"][len("unix:"):]
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))
        import sandboxd

        client = sandboxd.Client(socket_path)
        first = client.acquire("t-1", user_id="alice")
        serving_standin.control("POST", "/_standin/tokens/expire", {"token": TOKEN})
        serving_standin.control("POST", "/_standin/tokens", {"token": "rotated-token"})
        token_file.write_text("rotated-token\n")  # what the kubelet does to a bound token
        second = client.acquire("t-2", user_id="alice")
        assert second.path == "created"
        client.destroy(first.sandbox_id)
        client.destroy(second.sandbox_id)
    finally:
        served.terminate()
        served.wait(timeout=60)


def test_an_exec_user_is_refused_in_one_sentence_naming_it(serving_standin):
    text = serving_standin.kubeconfig.read_text().replace(
        f"token: {TOKEN}", "exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}")
    serving_standin.kubeconfig.write_text(text)
    checked = sandboxctl(config_for(serving_standin), "check-config", check=False)
    assert checked.returncode != 0
    assert "user 'tester' authenticates through 'exec'" in checked.stderr


@pytest.mark.skipif(not PROVISIONER, reason="needs SANDBOXD_PROVISIONER (ctest sets it)")
def test_sandboxd_provisioner_over_the_plugin_serves_a_deerflow_gateway(serving_standin, tmp_path):
    """sandboxd-provisioner with the kubernetes backend is a drop-in for DeerFlow's provisioner:
    a gateway through remote_provisioner:RemoteSandboxBackend gets a sandbox whose pod lives on
    the (stand-in) cluster, reaches it, and deletes it."""
    base = tmp_path / "deer-flow"
    base.mkdir(mode=0o700)
    settings = tmp_path / "provisioner.json"
    settings.write_text(json.dumps({"provisioner": {
        "listen": "127.0.0.1:0", "api_key": "change-me", "host_base_dir": str(base),
        "backend": {"use": "kubernetes:KubernetesBackend",
                    "kubeconfig": str(serving_standin.kubeconfig), "node_host": "127.0.0.1",
                    "image": "all-in-one", "ready_timeout_seconds": 30}}}))
    service = subprocess.Popen([PROVISIONER, "--config", str(settings)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        line = service.stdout.readline()
        assert "listening on" in line, line + service.stderr.read()
        url = line.split("listening on", 1)[1].strip()
        gateway = tmp_path / "gateway.json"  # the gateway shares the DeerFlow state root
        gateway.write_text(json.dumps({"sandbox": {
            "backend": {"use": "remote_provisioner:RemoteSandboxBackend", "provisioner_url": url,
                        "provisioner_api_key": "change-me"},
            "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                          "path": str(base / "leases.db")},
            "base_dir": str(base)}}))
        out = sandboxctl(str(gateway), "acquire", "--user", "alice", "--thread", "t-1").stdout
        assert value(out, "path") == "created"
        with urllib.request.urlopen(value(out, "sandbox_url") + "/v1/sandbox", timeout=5) as answer:
            assert answer.status == 200
        v1 = python_api(serving_standin)
        pods = v1.list_namespaced_pod(NAMESPACE, label_selector="app=deer-flow-sandbox").items
        assert [p.metadata.name for p in pods] == [f"sandbox-{value(out, 'sandbox_id')}"]
        first_uid = pods[0].metadata.uid

        # Issue 32 A.4: every answer names the contract the pod was made under, so the
        # conversation's sandbox is the same one however often it is asked for.
        def api(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
            request = urllib.request.Request(
                url + path, method=method, data=json.dumps(body).encode() if body else None,
                headers={"X-API-Key": "change-me", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as refused:
                return refused.code, json.loads(refused.read())

        sandbox_id = value(out, "sandbox_id")
        assert api("GET", "/api/capabilities")[1]["mount_contract_version"] == 2
        status, got = api("GET", f"/api/sandboxes/{sandbox_id}")
        assert status == 200 and got["mount_contract_version"] == 2, got
        # DeerFlow's provisioner client asks for the sandbox again, as it does on every turn.
        again = {"sandbox_id": sandbox_id, "thread_id": "t-1", "user_id": "alice",
                 "required_mount_contract_version": 2}
        status, got = api("POST", "/api/sandboxes", again)
        assert status == 200, got
        assert got["mount_contract_version"] == 2 and got["sandbox_url"] == value(out, "sandbox_url")
        # A second gateway (its own state) acquires the same conversation: the same pod.
        second_state = base / "gateway2"
        second_state.mkdir(mode=0o700)
        gateway2 = tmp_path / "gateway2.json"
        gateway2.write_text(json.dumps({"sandbox": {
            "backend": {"use": "remote_provisioner:RemoteSandboxBackend", "provisioner_url": url,
                        "provisioner_api_key": "change-me"},
            "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                          "path": str(base / "leases.db")},
            "base_dir": str(second_state)}}))
        second = sandboxctl(str(gateway2), "acquire", "--user", "alice", "--thread", "t-1").stdout
        assert value(second, "sandbox_id") == sandbox_id
        pods = v1.list_namespaced_pod(NAMESPACE, label_selector="app=deer-flow-sandbox").items
        assert [p.metadata.uid for p in pods] == [first_uid], "the conversation's pod was replaced"
        sandboxctl(str(gateway2), "destroy", sandbox_id)  # the lease is the second gateway's now
        assert v1.list_namespaced_pod(NAMESPACE).items == []
    finally:
        service.terminate()
        service.wait(timeout=60)


@pytest.mark.skipif(not PROVISIONER, reason="needs SANDBOXD_PROVISIONER (ctest sets it)")
def test_a_full_namespace_through_the_provisioner_is_a_capacity_refusal(serving_standin, tmp_path):
    """Issue 32 A.5: a quota refusal reaches a provisioner client as 429 with Retry-After (not a
    500), and a sandboxd gateway through remote_provisioner as its capacity refusal (exit 7)."""
    base = tmp_path / "deer-flow"
    base.mkdir(mode=0o700)
    settings = tmp_path / "provisioner.json"
    settings.write_text(json.dumps({"provisioner": {
        "listen": "127.0.0.1:0", "api_key": "change-me", "host_base_dir": str(base),
        "backend": {"use": "kubernetes:KubernetesBackend",
                    "kubeconfig": str(serving_standin.kubeconfig), "node_host": "127.0.0.1",
                    "image": "all-in-one", "ready_timeout_seconds": 30}}}))
    serving_standin.control("POST", "/_standin/quota", {"pods": 0})
    service = subprocess.Popen([PROVISIONER, "--config", str(settings)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        line = service.stdout.readline()
        assert "listening on" in line, line + service.stderr.read()
        url = line.split("listening on", 1)[1].strip()
        request = urllib.request.Request(
            url + "/api/sandboxes", method="POST",
            data=json.dumps({"sandbox_id": ALICE_T1, "thread_id": "t-1", "user_id": "alice",
                             "required_mount_contract_version": 2}).encode(),
            headers={"X-API-Key": "change-me", "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 429
        assert refused.value.headers["Retry-After"] == "1"
        assert "exceeded quota" in json.loads(refused.value.read())["detail"]
        gateway = tmp_path / "gateway.json"
        gateway.write_text(json.dumps({"sandbox": {
            "backend": {"use": "remote_provisioner:RemoteSandboxBackend", "provisioner_url": url,
                        "provisioner_api_key": "change-me"},
            "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                          "path": str(base / "leases.db")},
            "base_dir": str(base)}}))
        done = sandboxctl(str(gateway), "acquire", "--user", "alice", "--thread", "t-1",
                          check=False)
        assert done.returncode == 7, done.stderr
        assert "exceeded quota" in done.stderr
    finally:
        service.terminate()
        service.wait(timeout=60)


REAL_CLUSTER = os.environ.get("SANDBOXD_TEST_KUBECONFIG", "")


@pytest.mark.skipif(not REAL_CLUSTER, reason="SANDBOXD_TEST_KUBECONFIG is not set: no real cluster "
                    "to run against (CI exercises the stand-in only)")
def test_on_a_real_cluster_a_sandbox_is_created_reached_and_deleted(tmp_path):
    """The same path on a real cluster: SANDBOXD_TEST_KUBECONFIG names its kubeconfig;
    SANDBOXD_TEST_KUBE_NODE_HOST where a NodePort is reached, SANDBOXD_TEST_IMAGE the image."""
    (tmp_path / "state").mkdir()
    config = tmp_path / "sandboxd.json"
    config.write_text(json.dumps({"sandbox": {
        "backend": {"use": "kubernetes:KubernetesBackend", "kubeconfig": REAL_CLUSTER,
                    "node_host": os.environ.get("SANDBOXD_TEST_KUBE_NODE_HOST", "127.0.0.1"),
                    **({"image": os.environ["SANDBOXD_TEST_IMAGE"]}
                       if os.environ.get("SANDBOXD_TEST_IMAGE") else {})},
        "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                      "path": str(tmp_path / "state" / "leases.db")},
        "base_dir": str(tmp_path / "state")}}))
    # Twice: the second acquire comes while the first pod is still terminating (a real kubelet
    # takes a moment to stop it), so it waits for the name and gets a new pod.
    for _ in range(2):
        out = sandboxctl(str(config), "acquire", "--user", "sandboxd-test", "--thread", "t-1").stdout
        try:
            assert value(out, "path") == "created"
            with urllib.request.urlopen(value(out, "sandbox_url") + "/v1/sandbox",
                                        timeout=10) as answer:
                assert answer.status == 200
        finally:
            sandboxctl(str(config), "destroy", value(out, "sandbox_id"))


def test_orphan_reconciliation_lists_pods_in_pages_with_continue(serving_standin):
    """list_running is one labelled list paged with limit/continue, never a GET per sandbox:
    three sandboxes, pages of 2, seen by a second state directory's reconciliation."""
    config = config_for(serving_standin, list_page_size=2)
    ids = [value(sandboxctl(config, "acquire", "--user", "alice", "--thread", f"t-{n}").stdout,
                 "sandbox_id") for n in range(3)]
    other = serving_standin.directory / "other"
    other.mkdir()
    second = json.loads(Path(config).read_text())
    second["sandbox"]["base_dir"] = str(other)
    second["sandbox"]["ownership"]["path"] = str(other / "leases.db")
    (other / "sandboxd.json").write_text(json.dumps(second))
    before = len(serving_standin.control("GET", "/_standin/requests")["requests"])
    report = sandboxctl(str(other / "sandboxd.json"), "reconcile").stdout
    assert "3 found" in report, report
    requests = serving_standin.control("GET", "/_standin/requests")["requests"][before:]
    pod_lists = [r for r in requests if r["method"] == "GET" and r["path"].endswith("/pods")]
    assert len(pod_lists) == 2, pod_lists
    assert "limit=2" in pod_lists[0]["query"] and "continue=" in pod_lists[1]["query"]
    assert not any(r["path"].split("/")[-1].startswith("sandbox-") for r in requests
                   if r["method"] == "GET"), "one GET per sandbox"
    for sandbox_id in ids:
        sandboxctl(config, "destroy", sandbox_id)
