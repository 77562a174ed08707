"""Issue 24: the Kubernetes stand-in is only worth what the real clients accept. Debian's kubectl
(and any other kubectl on PATH) and the official Python client (python3-kubernetes) create,
list by label, read and delete pods and services through it, read back what the other made,
and see the API's conventions where they expect them: Status errors with reason and code,
409 AlreadyExists and Conflict, set-based selectors, limit/continue, watches (and 410 Expired),
ownerReference garbage collection, graceful pod deletion, pod phases and conditions, a 403
quota refusal and a token that expires."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import TOKEN, kubectls

kubernetes = pytest.importorskip("kubernetes", reason="needs python3-kubernetes (scripts/setup.sh)")
from kubernetes import client as k8s  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402

NAMESPACE = "sandboxes"
KUBECTLS = kubectls()


def api(standin) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_config.new_client_from_config(str(standin.kubeconfig)))


def pod(name: str, **labels: str) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, labels={"app": "deer-flow-sandbox", **labels}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="sandbox", image="all-in-one")]))


def run_kubectl(kubectl: str, standin, *args: str, stdin: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([kubectl, "--kubeconfig", str(standin.kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise AssertionError(f"{kubectl} {' '.join(args)} failed: {done.stderr}")
    return done


@pytest.mark.skipif(not KUBECTLS, reason="needs kubectl (Debian's kubernetes-client; scripts/setup.sh)")
@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_kubectl_creates_lists_reads_and_deletes_pods_and_services(kubectl, standin):
    version = run_kubectl(kubectl, standin, "version", "--client").stdout.strip().splitlines()[0]
    print(f"[ figures ] {kubectl}: {version}")
    manifest = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "sandbox-abc", "labels": {"app": "deer-flow-sandbox",
                                                         "sandbox-id": "abc"}},
         "spec": {"containers": [{"name": "sandbox", "image": "all-in-one"}]}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "sandbox-abc-svc", "labels": {"app": "deer-flow-sandbox"}},
         "spec": {"type": "NodePort", "selector": {"sandbox-id": "abc"},
                  "ports": [{"port": 8080, "targetPort": 8080}]}},
    ]}
    created = run_kubectl(kubectl, standin, "create", "--validate=false", "-f", "-",
                          stdin=json.dumps(manifest)).stdout
    assert "pod/sandbox-abc created" in created and "service/sandbox-abc-svc created" in created

    listed = json.loads(run_kubectl(kubectl, standin, "get", "pods,services", "-l",
                                    "app=deer-flow-sandbox", "-o", "json").stdout)
    assert sorted((i["kind"], i["metadata"]["name"]) for i in listed["items"]) == [
        ("Pod", "sandbox-abc"), ("Service", "sandbox-abc-svc")]
    assert run_kubectl(kubectl, standin, "get", "pods", "-l", "sandbox-id in (abc,def)", "-o",
                       "name").stdout.split() == ["pod/sandbox-abc"]
    assert run_kubectl(kubectl, standin, "get", "pods", "-l", "!sandbox-id", "-o",
                       "name").stdout.split() == []
    phase = run_kubectl(kubectl, standin, "get", "pod", "sandbox-abc", "-o",
                        "jsonpath={.status.phase}/{.status.conditions[?(@.type=='Ready')].status}")
    assert phase.stdout == "Running/True"
    node_port = run_kubectl(kubectl, standin, "get", "service", "sandbox-abc-svc", "-o",
                            "jsonpath={.spec.ports[0].nodePort}").stdout
    assert 30000 <= int(node_port) <= 32767

    again = run_kubectl(kubectl, standin, "create", "--validate=false", "-f", "-",
                        stdin=json.dumps(manifest["items"][0]), check=False)
    assert again.returncode != 0 and "already exists" in again.stderr, again.stderr

    assert "deleted" in run_kubectl(kubectl, standin, "delete", "service", "sandbox-abc-svc").stdout
    assert "deleted" in run_kubectl(kubectl, standin, "delete", "pod", "sandbox-abc").stdout
    gone = run_kubectl(kubectl, standin, "get", "pod", "sandbox-abc", check=False)
    assert gone.returncode != 0 and "not found" in gone.stderr


@pytest.mark.skipif(not KUBECTLS, reason="needs kubectl (Debian's kubernetes-client; scripts/setup.sh)")
@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_kubectl_and_the_python_client_read_what_the_other_made(kubectl, standin):
    v1 = api(standin)
    v1.create_namespaced_pod(NAMESPACE, pod("sandbox-py", **{"sandbox-id": "py"}))
    shown = json.loads(run_kubectl(kubectl, standin, "get", "pod", "sandbox-py", "-o",
                                   "json").stdout)
    assert shown["metadata"]["labels"] == {"app": "deer-flow-sandbox", "sandbox-id": "py"}
    run_kubectl(kubectl, standin, "create", "--validate=false", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "sandbox-kc", "labels": {"app": "deer-flow-sandbox"}},
         "spec": {"containers": [{"name": "sandbox", "image": "all-in-one"}]}}))
    read = v1.read_namespaced_pod("sandbox-kc", NAMESPACE)
    assert read.spec.containers[0].image == "all-in-one" and read.metadata.uid


@pytest.mark.skipif(not KUBECTLS, reason="needs kubectl (Debian's kubernetes-client; scripts/setup.sh)")
@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_an_expired_token_is_refused_and_kubectl_says_so(kubectl, standin):
    run_kubectl(kubectl, standin, "get", "pods")
    standin.control("POST", "/_standin/tokens/expire", {"token": TOKEN})
    refused = run_kubectl(kubectl, standin, "get", "pods", check=False)
    assert refused.returncode != 0
    assert "Unauthorized" in refused.stderr or "provide credentials" in refused.stderr


def test_the_python_client_sees_the_apis_conventions(standin):
    v1 = api(standin)
    made = v1.create_namespaced_pod(NAMESPACE, pod("sandbox-a", **{"sandbox-id": "a"}))
    assert made.metadata.uid and made.metadata.resource_version and made.status.phase == "Running"

    with pytest.raises(k8s.exceptions.ApiException) as exists:
        v1.create_namespaced_pod(NAMESPACE, pod("sandbox-a"))
    body = json.loads(exists.value.body)
    assert (exists.value.status, body["kind"], body["reason"], body["code"]) == (
        409, "Status", "AlreadyExists", 409)

    stale = v1.read_namespaced_pod("sandbox-a", NAMESPACE)
    stale.metadata.labels["touched"] = "once"
    v1.replace_namespaced_pod("sandbox-a", NAMESPACE, stale)
    stale.metadata.labels["touched"] = "twice"
    with pytest.raises(k8s.exceptions.ApiException) as conflict:
        v1.replace_namespaced_pod("sandbox-a", NAMESPACE, stale)  # its resourceVersion is old
    assert conflict.value.status == 409 and json.loads(conflict.value.body)["reason"] == "Conflict"

    with pytest.raises(k8s.exceptions.ApiException) as missing:
        v1.read_namespaced_pod("sandbox-none", NAMESPACE)
    assert missing.value.status == 404 and json.loads(missing.value.body)["reason"] == "NotFound"


def test_lists_page_with_limit_and_continue_under_set_based_selectors(standin):
    v1 = api(standin)
    for n in range(7):
        v1.create_namespaced_pod(NAMESPACE, pod(f"sandbox-{n}", tier="odd" if n % 2 else "even"))
    v1.create_namespaced_pod(NAMESPACE, k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="other", labels={"app": "something-else"}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="c", image="i")])))
    names, pages, token = [], 0, None
    while True:
        page = v1.list_namespaced_pod(NAMESPACE, label_selector="app=deer-flow-sandbox", limit=3,
                                      _continue=token)
        pages += 1
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(names)
    assert (names, pages) == ([f"sandbox-{n}" for n in range(7)], 3)
    odd = v1.list_namespaced_pod(NAMESPACE, label_selector="app=deer-flow-sandbox,tier notin (even)")
    assert [p.metadata.name for p in odd.items] == ["sandbox-1", "sandbox-3", "sandbox-5"]
    no_tier = v1.list_namespaced_pod(NAMESPACE, label_selector="!tier")
    assert [p.metadata.name for p in no_tier.items] == ["other"]
    by_name = v1.list_namespaced_pod(NAMESPACE, field_selector="metadata.name=sandbox-4")
    assert [p.metadata.name for p in by_name.items] == ["sandbox-4"]


def test_deleting_a_pod_collects_the_service_it_owns(standin):
    v1 = api(standin)
    owner = v1.create_namespaced_pod(NAMESPACE, pod("sandbox-o"))
    v1.create_namespaced_service(NAMESPACE, k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name="sandbox-o-svc", owner_references=[k8s.V1OwnerReference(
            api_version="v1", kind="Pod", name="sandbox-o", uid=owner.metadata.uid)]),
        spec=k8s.V1ServiceSpec(selector={"app": "deer-flow-sandbox"},
                               ports=[k8s.V1ServicePort(port=8080)])))
    v1.create_namespaced_service(NAMESPACE, k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name="unowned-svc"),
        spec=k8s.V1ServiceSpec(ports=[k8s.V1ServicePort(port=80)])))
    deleted = v1.delete_namespaced_pod("sandbox-o", NAMESPACE)
    assert deleted.metadata.name == "sandbox-o"
    assert [s.metadata.name for s in v1.list_namespaced_service(NAMESPACE).items] == ["unowned-svc"]


def until_gone(read, what: str) -> None:
    """Polls `read` until it is 404 NotFound (bounded: the stand-in lets a pod go within 2 s)."""
    import time

    for _ in range(100):
        try:
            read()
        except k8s.exceptions.ApiException as e:
            if e.status == 404:
                return
            raise
        time.sleep(0.1)
    raise AssertionError(f"{what} was still there after 10 s")


def test_a_deleted_pod_stays_terminating_with_its_name_taken_then_goes_with_its_service(
        terminating_standin):
    v1 = api(terminating_standin)
    owner = v1.create_namespaced_pod(NAMESPACE, pod("sandbox-t"))
    v1.create_namespaced_service(NAMESPACE, k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name="sandbox-t-svc", owner_references=[k8s.V1OwnerReference(
            api_version="v1", kind="Pod", name="sandbox-t", uid=owner.metadata.uid)]),
        spec=k8s.V1ServiceSpec(ports=[k8s.V1ServicePort(port=8080)])))
    deleted = v1.delete_namespaced_pod("sandbox-t", NAMESPACE, grace_period_seconds=20)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 20

    terminating = v1.read_namespaced_pod("sandbox-t", NAMESPACE)
    assert terminating.metadata.uid == owner.metadata.uid
    assert terminating.metadata.deletion_timestamp is not None
    with pytest.raises(k8s.exceptions.ApiException) as taken:
        v1.create_namespaced_pod(NAMESPACE, pod("sandbox-t"))
    assert (taken.value.status, json.loads(taken.value.body)["reason"]) == (409, "AlreadyExists")
    assert [s.metadata.name for s in v1.list_namespaced_service(NAMESPACE).items] == [
        "sandbox-t-svc"]  # collected with its owner, which is not gone yet
    again = v1.delete_namespaced_pod("sandbox-t", NAMESPACE)
    assert again.metadata.deletion_grace_period_seconds == 20  # the first delete's, unchanged

    until_gone(lambda: v1.read_namespaced_pod("sandbox-t", NAMESPACE), "the terminating pod")
    assert v1.list_namespaced_service(NAMESPACE).items == []
    assert v1.create_namespaced_pod(NAMESPACE, pod("sandbox-t")).metadata.uid != owner.metadata.uid

    v1.delete_namespaced_pod("sandbox-t", NAMESPACE, grace_period_seconds=0)
    with pytest.raises(k8s.exceptions.ApiException) as at_once:
        v1.read_namespaced_pod("sandbox-t", NAMESPACE)
    assert at_once.value.status == 404  # a grace period of 0 deletes at once


@pytest.mark.skipif(not KUBECTLS, reason="needs kubectl (Debian's kubernetes-client; scripts/setup.sh)")
@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_kubectl_sees_a_deleted_pod_terminating(kubectl, terminating_standin):
    v1 = api(terminating_standin)
    v1.create_namespaced_pod(NAMESPACE, pod("sandbox-k"))
    # --wait=false: to see it while it terminates (kubectl would wait until it is gone).
    run_kubectl(kubectl, terminating_standin, "delete", "pod", "sandbox-k", "--wait=false")
    shown = run_kubectl(kubectl, terminating_standin, "get", "pod", "sandbox-k", "-o",
                        "jsonpath={.metadata.deletionTimestamp}/"
                        "{.metadata.deletionGracePeriodSeconds}").stdout
    stamp, grace = shown.split("/")
    assert stamp.endswith("Z") and grace == "30"
    until_gone(lambda: v1.read_namespaced_pod("sandbox-k", NAMESPACE), "the terminating pod")


def test_a_watch_streams_a_pods_life_and_answers_410_for_a_version_too_old(terminating_standin):
    from kubernetes import watch

    v1 = api(terminating_standin)
    since = v1.list_namespaced_pod(NAMESPACE).metadata.resource_version
    v1.create_namespaced_pod(NAMESPACE, pod("sandbox-w"))
    v1.create_namespaced_pod(NAMESPACE, pod("other-w"))
    v1.delete_namespaced_pod("sandbox-w", NAMESPACE)
    seen = []
    stream = watch.Watch()
    for event in stream.stream(v1.list_namespaced_pod, NAMESPACE, resource_version=since,
                               field_selector="metadata.name=sandbox-w", timeout_seconds=20):
        seen.append((event["type"], event["object"].metadata.deletion_timestamp is not None))
        if event["type"] == "DELETED":
            stream.stop()
    assert seen == [("ADDED", False), ("MODIFIED", True), ("DELETED", True)]

    now = [(e["type"], e["object"].metadata.name) for e in watch.Watch().stream(
        v1.list_namespaced_pod, NAMESPACE, timeout_seconds=1)]
    assert now == [("ADDED", "other-w")]  # no version: what is there, then what happens

    with pytest.raises(k8s.exceptions.ApiException) as expired:
        for _ in watch.Watch().stream(v1.list_namespaced_pod, NAMESPACE, resource_version="1",
                                      timeout_seconds=5):
            pass
    assert expired.value.status == 410


@pytest.mark.skipif(not KUBECTLS, reason="needs kubectl (Debian's kubernetes-client; scripts/setup.sh)")
@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_kubectl_waits_on_a_watch_for_ready_and_for_deletion(kubectl, terminating_standin):
    v1 = api(terminating_standin)
    v1.create_namespaced_pod(NAMESPACE, pod("sandbox-kw"))
    terminating_standin.control("POST", f"/_standin/pods/{NAMESPACE}/sandbox-kw",
                                {"phase": "Pending"})
    waiting = subprocess.Popen(
        [kubectl, "--kubeconfig", str(terminating_standin.kubeconfig), "wait",
         "--for=condition=Ready", "pod/sandbox-kw", "--timeout=30s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    terminating_standin.control("POST", f"/_standin/pods/{NAMESPACE}/sandbox-kw",
                                {"phase": "Running", "ready": True})
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0 and "condition met" in out, err

    # kubectl delete waits for the deletion (a watch) through the pod's termination.
    run_kubectl(kubectl, terminating_standin, "delete", "pod", "sandbox-kw")
    with pytest.raises(k8s.exceptions.ApiException) as gone:
        v1.read_namespaced_pod("sandbox-kw", NAMESPACE)
    assert gone.value.status == 404


def test_pod_states_the_test_drives_read_as_the_api_reports_them(pending_standin):
    v1 = api(pending_standin)
    v1.create_namespaced_pod(NAMESPACE, pod("sandbox-s"))
    created = v1.read_namespaced_pod("sandbox-s", NAMESPACE)
    ready = {c.type: c.status for c in created.status.conditions}["Ready"]
    assert (created.status.phase, ready) == ("Pending", "False")

    def drive(state: dict) -> k8s.V1Pod:
        pending_standin.control("POST", f"/_standin/pods/{NAMESPACE}/sandbox-s", state)
        return v1.read_namespaced_pod("sandbox-s", NAMESPACE)

    pulled = drive({"waiting": "ImagePullBackOff", "message": 'Back-off pulling image "x"'})
    waiting = pulled.status.container_statuses[0].state.waiting
    assert (waiting.reason, waiting.message) == ("ImagePullBackOff", 'Back-off pulling image "x"')
    crashing = drive({"phase": "Running", "waiting": "CrashLoopBackOff", "restarts": 4})
    assert crashing.status.container_statuses[0].restart_count == 4
    unschedulable = drive({"unschedulable": "0/1 nodes are available: 1 Insufficient cpu."})
    scheduled = unschedulable.status.conditions[0]
    assert (scheduled.type, scheduled.status, scheduled.reason) == (
        "PodScheduled", "False", "Unschedulable")
    running = drive({"phase": "Running", "ready": True})
    assert {c.type: c.status for c in running.status.conditions}["Ready"] == "True"
    assert running.status.container_statuses[0].state.running is not None


def test_a_quota_refusal_is_403_forbidden_naming_the_quota(standin):
    v1 = api(standin)
    standin.control("POST", "/_standin/quota", {"pods": 1})
    v1.create_namespaced_pod(NAMESPACE, pod("sandbox-q1"))
    with pytest.raises(k8s.exceptions.ApiException) as refused:
        v1.create_namespaced_pod(NAMESPACE, pod("sandbox-q2"))
    body = json.loads(refused.value.body)
    assert (refused.value.status, body["reason"]) == (403, "Forbidden")
    assert "exceeded quota" in body["message"]


def test_an_expired_token_is_401_until_a_new_one_is_given(standin):
    v1 = api(standin)
    v1.list_namespaced_pod(NAMESPACE)
    standin.control("POST", "/_standin/tokens/expire", {"token": TOKEN})
    with pytest.raises(k8s.exceptions.ApiException) as refused:
        v1.list_namespaced_pod(NAMESPACE)
    assert refused.value.status == 401
    standin.control("POST", "/_standin/tokens", {"token": "standin-token-2"})
    renewed = k8s.Configuration()
    renewed.host = standin.url
    renewed.ssl_ca_cert = str(standin.ca)
    renewed.api_key = {"authorization": "Bearer standin-token-2"}
    assert k8s.CoreV1Api(k8s.ApiClient(renewed)).list_namespaced_pod(NAMESPACE).items == []


@pytest.mark.skipif(not KUBECTLS, reason="needs kubectl (Debian's kubernetes-client; scripts/setup.sh)")
@pytest.mark.parametrize("kubectl", KUBECTLS)
def test_network_policies_are_served_as_networking_k8s_io_v1(kubectl, standin):
    """Issue 33: kubectl finds networkpolicies through discovery (/apis), creates, reads and
    deletes one; an invalid one is 422 as the API server answers it; the Python client's
    NetworkingV1Api reads what kubectl made, and one a pod owns goes with the pod."""
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "deny-all", "labels": {"app": "deer-flow-sandbox"}},
              "spec": {"podSelector": {"matchLabels": {"sandbox-id": "abc"}},
                       "policyTypes": ["Ingress", "Egress"]}}
    run_kubectl(kubectl, standin, "create", "--validate=false", "-n", NAMESPACE, "-f", "-",
                stdin=json.dumps(policy))
    shown = run_kubectl(kubectl, standin, "get", "netpol", "-n", NAMESPACE, "-o",
                        "jsonpath={.items[*].metadata.name}").stdout
    assert shown == "deny-all"
    client = k8s_config.new_client_from_config(str(standin.kubeconfig))
    read = k8s.NetworkingV1Api(client).read_namespaced_network_policy("deny-all", NAMESPACE)
    assert read.spec.policy_types == ["Ingress", "Egress"]
    invalid = dict(policy, metadata={"name": "no-selector"}, spec={"policyTypes": ["Ingress"]})
    refused = run_kubectl(kubectl, standin, "create", "--validate=false", "-n", NAMESPACE, "-f",
                          "-", stdin=json.dumps(invalid), check=False)
    assert refused.returncode != 0 and "spec.podSelector: Required value" in refused.stderr
    run_kubectl(kubectl, standin, "delete", "networkpolicy", "deny-all", "-n", NAMESPACE)

    owner = api(standin).create_namespaced_pod(NAMESPACE, pod("sandbox-owner"))
    owned = dict(policy, metadata={"name": "owned", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "sandbox-owner", "uid": owner.metadata.uid}]})
    k8s.NetworkingV1Api(client).create_namespaced_network_policy(NAMESPACE, owned)
    api(standin).delete_namespaced_pod("sandbox-owner", NAMESPACE)
    assert k8s.NetworkingV1Api(client).list_namespaced_network_policy(NAMESPACE).items == []
